"""What a table commit takes from the journal, and which journal objects may go (pure: no I/O).

Offsets are assigned before the journal write and never again: a commit places entries at their own
offsets. Per partition, against the table's log end offset: an entry the table already covers is skipped
(a replay after a crash, or a commit that landed before its bookkeeping); the entry at the log end is
committed, then the next from its end, and so on; an entry above a gap waits for the entries before it
(`blocked`; in a replay, where nothing else will fill the gap, an error); one that straddles the log end
means another writer put records at these offsets (`conflicting`: never committed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from lakelog.platform.journal.objects import Entry


@dataclass
class CommitPlan:
    commit: list[Entry] = field(default_factory=list)  # per partition in offset order, dense from the log end
    skip: list[Entry] = field(default_factory=list)
    blocked: list[Entry] = field(default_factory=list)
    conflicting: list[Entry] = field(default_factory=list)

    @property
    def misfit(self) -> Entry | None:
        """The first entry that cannot be placed at its offsets (above a gap, or over another's records)."""
        return (self.blocked + self.conflicting)[0] if self.blocked or self.conflicting else None

    def bases(self) -> dict[int, int]:
        """The log end offset each committed partition must still have when the commit is made."""
        out: dict[int, int] = {}
        for entry in self.commit:
            out.setdefault(entry.partition, entry.base)
        return out

    def ends(self) -> dict[int, int]:
        """The log end offsets the commit leaves."""
        out: dict[int, int] = {}
        for entry in self.commit:
            out[entry.partition] = entry.end
        return out


def plan_commit(table_ends: Mapping[int, int], entries: Sequence[Entry]) -> CommitPlan:
    """`table_ends`: the table's log end offset per partition (a partition missing is at 0); `entries`: one
    topic's uncommitted entries, any order."""
    plan = CommitPlan()
    by_partition: dict[int, list[Entry]] = {}
    for entry in entries:
        by_partition.setdefault(entry.partition, []).append(entry)
    for partition in sorted(by_partition):
        cursor = table_ends.get(partition, 0)
        for entry in sorted(by_partition[partition], key=lambda e: e.base):
            if entry.count <= 0 or entry.end <= table_ends.get(partition, 0):
                plan.skip.append(entry)
            elif entry.base == cursor:
                plan.commit.append(entry)
                cursor = entry.end
            elif entry.base < cursor:
                plan.conflicting.append(entry)
            else:
                plan.blocked.append(entry)
                cursor = -1  # nothing after a gap is committed
    return plan


def deletable_slots(outstanding: Mapping[int, int], keep: int | None) -> list[int]:
    """The slots of one generation to delete now: in slot order, the lowest ones whose entries are all
    committed (`outstanding[slot] == 0`), stopping at the first that is not; never `keep` (the generation's
    highest written slot, which stays as a tombstone while the generation may still write)."""
    out = []
    for slot in sorted(outstanding):
        if outstanding[slot] > 0 or slot == keep:
            break
        out.append(slot)
    return out
