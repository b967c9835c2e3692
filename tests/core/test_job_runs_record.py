"""The record of maintenance job runs (`<root>/_control/job_runs`, read by `GET /v1/jobs`) on a real local root:
runs started from the CLI are recorded as the scheduler's are (trigger `cli` against `schedule`), rows written
before the trigger column still read, and each append drops the runs past the retention (Delta's delete)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from lakelog.platform import Broker
from lakelog.platform.clock import now_ms
from lakelog.platform.delta.control_table import open_control_table, read_control_table
from lakelog.platform.ops.job_runs import JOB_RUNS_SCHEMA, JobRun, record_runs, recent_runs
from lakelog.platform.layout import JOB_RUNS_TABLE
from lakelog.platform.storage import Storage
from lakelog.settings import Settings
from lakelog.spark_jobs.jobs import JOBS
from lakelog.spark_jobs.scheduler import run_round

DAY = 86_400_000
WEEK = 7 * DAY


def lakelog(root: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lakelog.cli", "--root", root, *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "LAKELOG_LOG_LEVEL": "WARNING"})


def table_of(storage: Storage) -> DeltaTable:
    return DeltaTable(storage.uri(JOB_RUNS_TABLE), storage_options=storage.delta_options())


def test_runs_started_from_the_cli_are_recorded_as_the_schedulers_are(tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    assert lakelog(root, "topics", "create", "clicks").returncode == 0
    with Broker(Settings(root=root)) as broker:  # a scheduler round first (no Spark: nothing to rewrite)
        run_round(broker, None, threading.Event())
    vacuum = lakelog(root, "jobs", "vacuum", "--topic", "clicks")
    assert vacuum.returncode == 0, vacuum.stderr
    assert lakelog(root, "jobs", "retention", "--dry-run").returncode == 0  # changes nothing: not recorded
    failed = lakelog(root, "jobs", "retention", "--topic", "nope")
    assert failed.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in failed.stderr

    runs = recent_runs(Storage.open(root))
    assert [(r.job, r.trigger, r.ok) for r in runs] == [
        ("retention", "cli", False), ("vacuum", "cli", True), *[(job, "schedule", True) for job in reversed(JOBS)]]
    assert runs[0].topics == "nope"  # the failed run names what it was asked for
    assert runs[0].started_ms >= runs[1].started_ms + int(runs[1].seconds * 1000)
    assert len(table_of(Storage.open(root)).file_uris()) == 3  # a file per round, a file per CLI run


def test_rows_from_before_the_trigger_column_still_read(tmp_path: Path) -> None:
    storage = Storage.open(str(tmp_path / "data"))
    old_schema = pa.schema([f for f in JOB_RUNS_SCHEMA if f.name != "trigger"])
    uri = storage.uri(JOB_RUNS_TABLE)
    DeltaTable.create(uri, schema=old_schema, storage_options=storage.delta_options())  # as the scheduler made it
    old_row = {f.name: 0 for f in old_schema} | {"job": "roll", "topics": "clicks", "started_ms": now_ms() - DAY,
                                                 "seconds": 1.5, "ok": True, "commits": 2}
    write_deltalake(table_of(storage), pa.Table.from_pylist([old_row], schema=old_schema), mode="append")
    (only,) = recent_runs(storage)
    assert (only.job, only.trigger, only.commits) == ("roll", "schedule", 2)

    record_runs(storage, [JobRun("vacuum", "clicks", now_ms(), 0.2, True, files_deleted=3, trigger="cli")])
    assert "trigger" in table_of(storage).schema().to_arrow().names  # the table gained the column
    assert [(r.job, r.trigger, r.files_deleted) for r in recent_runs(storage)] == [
        ("vacuum", "cli", 3), ("roll", "schedule", 0)]


def test_each_append_drops_the_runs_past_the_retention(tmp_path: Path) -> None:
    storage = Storage.open(str(tmp_path / "data"))
    start = now_ms() - 8 * DAY

    def record(job: str, started: int, retention_ms: int = WEEK) -> None:  # the retention counts from `started`
        record_runs(storage, [JobRun(job, "", started, 1.0, True)], retention_ms)

    record("retention", start)
    record("roll", start + DAY // 2)
    record("compact", start + 6 * DAY)
    record("vacuum", start + 7 * DAY + DAY * 8 // 10, retention_ms=-1)  # past a week and a tenth, but -1 keeps all
    assert len(recent_runs(storage)) == 4
    version = table_of(storage).version()
    record("retention", start + 8 * DAY)  # what started a week before this goes: the first two runs
    table = table_of(storage)
    rows = read_control_table(storage, open_control_table(storage, JOB_RUNS_TABLE, JOB_RUNS_SCHEMA))
    assert sorted(rows.column("started_ms").to_pylist()) == [start + 6 * DAY, start + 7 * DAY + DAY * 8 // 10,
                                                             start + 8 * DAY]
    assert len(table.file_uris()) == 3  # the two old runs' files are gone from the table
    assert table.version() == version + 2  # the append, then one delete for both

    record("roll", start + 8 * DAY + 1)  # nothing is due: an append alone, no delete commit
    assert table_of(storage).version() == version + 3
    assert [r.job for r in recent_runs(storage)] == ["roll", "retention", "vacuum", "compact"]
