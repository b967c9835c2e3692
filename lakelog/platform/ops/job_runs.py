"""The record of maintenance job runs (`<root>/_control/job_runs`): one row per run, appended by the scheduler
after each round (one file per round), by `lakelog jobs ...` and by the spark-submit entry point (one file per
run), read by `GET /v1/jobs`. Only the newest files are read, so the table's growth never slows the reader, and
each append also drops the rows past the retention (`LAKELOG_JOB_RUNS_RETENTION_MS`), so it stays bounded."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from lakelog.platform.delta.control_table import control_table_exists, open_control_table
from lakelog.platform.layout import JOB_RUNS_TABLE
from lakelog.platform.storage import STORAGE_ERRORS, Storage

log = logging.getLogger(__name__)

NEWEST_FILES = 64  # each scheduler round appends one file, with a row per job; a run started by hand, one
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
TRIGGERS = ("schedule", "cli", "spark-submit")  # what started a run

JOB_RUNS_SCHEMA = pa.schema([
    pa.field("job", pa.string(), nullable=False),
    pa.field("topics", pa.string(), nullable=False),  # comma-separated: the topics the run planned work on
    pa.field("started_ms", pa.int64(), nullable=False),
    pa.field("seconds", pa.float64(), nullable=False),
    pa.field("ok", pa.bool_(), nullable=False),
    pa.field("commits", pa.int64(), nullable=False),
    pa.field("conflicts", pa.int64(), nullable=False),
    pa.field("files_removed", pa.int64(), nullable=False),
    pa.field("files_added", pa.int64(), nullable=False),
    pa.field("bytes_removed", pa.int64(), nullable=False),
    pa.field("records_in", pa.int64(), nullable=False),
    pa.field("records_out", pa.int64(), nullable=False),
    pa.field("files_deleted", pa.int64(), nullable=False),
    pa.field("trigger", pa.string(), nullable=True),  # one of TRIGGERS; null in rows from before the column
])


@dataclass(frozen=True)
class JobRun:
    job: str
    topics: str
    started_ms: int
    seconds: float
    ok: bool
    commits: int = 0
    conflicts: int = 0
    files_removed: int = 0
    files_added: int = 0
    bytes_removed: int = 0
    records_in: int = 0
    records_out: int = 0
    files_deleted: int = 0
    trigger: str = "schedule"


def record_runs(storage: Storage, runs: list[JobRun], retention_ms: int = DEFAULT_RETENTION_MS) -> None:
    """Append the runs (one file), then drop the rows that started more than `retention_ms` before the newest
    of them (-1 keeps every row): the record's own clock, not this machine's. A failed prune (a concurrent
    writer, the store) is logged and left to the next append."""
    if not runs:
        return
    table = open_control_table(storage, JOB_RUNS_TABLE, JOB_RUNS_SCHEMA)
    rows = pa.Table.from_pylist([asdict(r) for r in runs], schema=JOB_RUNS_SCHEMA)
    write_deltalake(table, rows, mode="append", schema_mode="merge")  # a table from before `trigger` gains it
    try:
        prune_runs(table, retention_ms, max(r.started_ms for r in runs))
    except (CommitFailedError, *STORAGE_ERRORS) as exc:
        log.warning("could not prune the job runs past retention: %s", exc)


def prune_cutoff(oldest_ms: int | None, now: int, retention_ms: int) -> int | None:
    """The start time before which rows go, or None when nothing is due. Pruning waits until the oldest row
    is a tenth of the retention past it (a week: about 17 hours), so that one delete drops many rounds instead
    of one commit per round; rows are kept at least `retention_ms` and at most 1.1 times that. `oldest_ms`
    None (no statistics) prunes."""
    if retention_ms < 0:
        return None
    cutoff = now - retention_ms
    if oldest_ms is not None and oldest_ms >= cutoff - retention_ms // 10:
        return None
    return cutoff


def prune_runs(table: DeltaTable, retention_ms: int, now: int) -> int:
    """Delete the rows that started before the retention (Delta's delete: whole files are removed, a file
    straddling the cutoff is rewritten); answers how many rows went. The files' statistics decide whether a
    delete is due, so a round with nothing to prune reads nothing and commits nothing."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return 0
    starts = actions.column("min.started_ms").to_pylist() if "min.started_ms" in actions.column_names else [None]
    oldest = None if None in starts else min(starts)
    cutoff = prune_cutoff(oldest, now, retention_ms)
    if cutoff is None:
        return 0
    return int(table.delete(f"started_ms < {int(cutoff)}").get("num_deleted_rows", 0))


def recent_runs(storage: Storage, limit: int = 50) -> list[JobRun]:
    """The newest runs first (none when no job ever ran)."""
    if not control_table_exists(storage, JOB_RUNS_TABLE):
        return []
    table = open_control_table(storage, JOB_RUNS_TABLE, JOB_RUNS_SCHEMA)
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    newest_start = actions.get("max.started_ms") or [None] * len(actions["path"])
    # newest first by the runs' start (a file a prune rewrote is new, its rows are not), else by when written
    files = sorted(zip(newest_start, actions["modification_time"], actions["path"]),
                   key=lambda f: f[0] if f[0] is not None else f[1], reverse=True)[:NEWEST_FILES]
    rows: list[dict] = []
    for _, _, path in files:
        with storage.open_input(storage.uri(JOB_RUNS_TABLE, path)) as source:
            rows += reversed(pq.read_table(source, pre_buffer=False, use_threads=False).to_pylist())
    rows.sort(key=lambda r: r["started_ms"], reverse=True)  # stable: of runs started in one ms, the later first
    return [as_run(r) for r in rows[:limit]]


def as_run(row: dict[str, Any]) -> JobRun:
    """A row as a JobRun; rows written before the `trigger` column were all the scheduler's."""
    fields: dict[str, Any] = {f.name: row.get(f.name) for f in JOB_RUNS_SCHEMA if f.name != "trigger"}
    return JobRun(**fields, trigger=row.get("trigger") or "schedule")
