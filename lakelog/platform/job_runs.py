"""The record of scheduled maintenance job runs (`<root>/_control/job_runs`): one row per run, appended by
the scheduler after each round, read by `GET /v1/jobs`. Only the newest files are read, so the table's
growth never slows the reader."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import write_deltalake

from lakelog.platform.control_table import control_table_exists, open_control_table
from lakelog.platform.layout import JOB_RUNS_TABLE
from lakelog.platform.storage import Storage

NEWEST_FILES = 64  # each scheduler round appends one file, with a row per job

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


def record_runs(storage: Storage, runs: list[JobRun]) -> None:
    if runs:
        table = open_control_table(storage, JOB_RUNS_TABLE, JOB_RUNS_SCHEMA)
        write_deltalake(table, pa.Table.from_pylist([asdict(r) for r in runs], schema=JOB_RUNS_SCHEMA), mode="append")


def recent_runs(storage: Storage, limit: int = 50) -> list[JobRun]:
    """The newest runs first (none when the scheduler never ran)."""
    if not control_table_exists(storage, JOB_RUNS_TABLE):
        return []
    table = open_control_table(storage, JOB_RUNS_TABLE, JOB_RUNS_SCHEMA)
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    newest = sorted(zip(actions["modification_time"], actions["path"]), reverse=True)[:NEWEST_FILES]
    rows: list[dict] = []
    for _, path in newest:
        with storage.open_input(storage.uri(JOB_RUNS_TABLE, path)) as source:
            rows += pq.read_table(source, pre_buffer=False, use_threads=False).to_pylist()
    rows.sort(key=lambda r: r["started_ms"], reverse=True)
    return [JobRun(**{f.name: r[f.name] for f in JOB_RUNS_SCHEMA}) for r in rows[:limit]]
