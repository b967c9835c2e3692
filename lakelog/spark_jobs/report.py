"""What a maintenance job run did (or, dry, would do), and the progress callback the CLI shows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from lakelog.compaction.planners import PartitionPlan

Progress = Callable[[str, int, int], None]  # (message, done, total)


@dataclass
class JobReport:
    job: str
    dry_run: bool
    plans: list[PartitionPlan] = field(default_factory=list)
    commits: int = 0
    conflicts: int = 0
    unchanged: int = 0
    files_removed: int = 0
    files_added: int = 0
    bytes_in: int = 0
    records_in: int = 0
    records_out: int = 0
    files_deleted: int = 0  # vacuum
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["plans"] = [p.summary() for p in self.plans]
        return out
