"""Time travel as the topic tables advertise it: `delta.deletedFileRetentionDuration` is the topic's
`file.delete.delay.ms` (set at creation, on alter, and by vacuum for tables from before), so a Delta reader
(delta-rs, and DuckDB's delta extension) reads a version older than a roll until the vacuum may delete
its files, and not after; `delta.logRetentionDuration` is the time the log cleanup keeps commit files."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable

from delta_readers import assert_duckdb_agrees, duckdb_rows
from lakelog.platform import Broker, Record
from lakelog.platform.log import RETAINED_COMMITS
from lakelog.settings import Settings
from lakelog.spark_jobs.jobs import run_job

PARTITIONS = 2
DELAY_MS = 600_000


def produce(broker: Broker, topic: str, flushes: int, tag: str) -> None:
    for f in range(flushes):
        broker.produce(topic, [Record(f"{tag}-{f}-{p}".encode(), key=b"k", partition=p) for p in range(PARTITIONS)])


def properties(broker: Broker, topic: str) -> dict[str, str]:
    topic_log = broker.topic_log(topic)
    return DeltaTable(topic_log.uri, storage_options=topic_log.storage.delta_options()).metadata().configuration


def delta_rs_rows(broker: Broker, topic: str, version: int) -> list[tuple]:
    topic_log = broker.topic_log(topic)
    table = DeltaTable(topic_log.uri, version=version, storage_options=topic_log.storage.delta_options())
    rows = table.to_pyarrow_table(columns=["partition", "offset", "key", "value"]).to_pylist()
    return sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in rows)


def test_a_version_before_a_roll_reads_for_as_long_as_advertised_and_no_longer(tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    with Broker(Settings(root=root, linger_ms=0)) as broker:
        broker.create_topic("t", PARTITIONS, {"file.delete.delay.ms": str(DELAY_MS)})
        assert properties(broker, "t")["delta.deletedFileRetentionDuration"] == "interval 600 seconds"
        assert properties(broker, "t")["delta.logRetentionDuration"] == "interval 30 seconds"
        produce(broker, "t", 6, "a")
        before = broker.topic_log("t").version
        expected = duckdb_rows(root, "t")
        assert len(expected) == 6 * PARTITIONS
        assert run_job("roll", broker).commits == 1  # the shared files it read are removed
        rolled = time.time() * 1000

        vacuumed = run_job("vacuum", broker, now_ms=int(rolled + DELAY_MS / 2))  # within the retention
        assert vacuumed.files_deleted == 0
        assert delta_rs_rows(broker, "t", before) == expected
        assert duckdb_rows(root, "t", version=before) == expected

        vacuumed = run_job("vacuum", broker, now_ms=int(rolled + DELAY_MS + 60_000))  # past it
        assert vacuumed.files_deleted == 6  # the six shared files the roll replaced
        with pytest.raises(Exception, match="(?i)not found|no such file"):
            delta_rs_rows(broker, "t", before)
        with pytest.raises(duckdb.Error):
            duckdb_rows(root, "t", version=before)
        assert_duckdb_agrees(root, "t")  # the latest version is whole


def test_versions_within_the_log_retention_read_past_the_count_of_commits_kept(tmp_path: Path) -> None:
    """The log cleanup keeps the last RETAINED_COMMITS versions, and nothing younger than the advertised
    delta.logRetentionDuration (30 s): far more commits than that, made quickly, all stay readable."""
    root = str(tmp_path / "data")
    with Broker(Settings(root=root, linger_ms=0)) as broker:
        broker.create_topic("t", PARTITIONS)
        produce(broker, "t", 2, "first")
        first = broker.topic_log("t").version
        produce(broker, "t", RETAINED_COMMITS + 30, "then")
        assert broker.topic_log("t").wait_for_checkpoints()
        assert len(duckdb_rows(root, "t", version=first)) == 2 * PARTITIONS
        assert len(delta_rs_rows(broker, "t", first)) == 2 * PARTITIONS


def test_the_advertised_retention_follows_the_config_and_vacuum_brings_old_tables_in_line(tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    with Broker(Settings(root=root, linger_ms=0)) as broker:
        broker.create_topic("t", PARTITIONS)
        assert properties(broker, "t")["delta.deletedFileRetentionDuration"] == "interval 60 seconds"  # Kafka's default
        version = broker.topic_log("t").version
        broker.alter_topic_config("t", {"retention.ms": "3600000"})
        assert broker.topic_log("t").refresh(full=True) is False and broker.topic_log("t").version == version
        broker.alter_topic_config("t", {"file.delete.delay.ms": "1500"})
        assert properties(broker, "t")["delta.deletedFileRetentionDuration"] == "interval 1500 milliseconds"

        topic_log = broker.topic_log("t")  # a table created before the rule advertised a day and two
        DeltaTable(topic_log.uri).alter.set_table_properties({"delta.deletedFileRetentionDuration": "interval 1 days",
                                                              "delta.logRetentionDuration": "interval 2 days"})
        produce(broker, "t", 1, "after")  # the writer follows the metadata commit
        run_job("vacuum", broker)
        assert {k: properties(broker, "t")[k] for k in ("delta.deletedFileRetentionDuration",
                                                        "delta.logRetentionDuration")} == {
            "delta.deletedFileRetentionDuration": "interval 1500 milliseconds",
            "delta.logRetentionDuration": "interval 30 seconds"}
        assert run_job("vacuum", broker, dry_run=True).files_deleted == 0
        produce(broker, "t", 1, "again")
        assert_duckdb_agrees(root, "t", acked={(0, 0): b"after-0-0", (1, 0): b"after-0-1", (0, 1): b"again-0-0"})
