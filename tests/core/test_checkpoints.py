"""Checkpoints written from the writer's own state (platform/delta/checkpoint.py): Delta readers load them as
they load delta-rs's, a checkpoint after the first makes no read of the log, and a commit the writer did not
see one by one (a maintenance job's) hands the next checkpoint back to delta-rs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakelog.platform import Broker, Record
from lakelog.platform.delta.delta_log import COMMIT_FILE
from lakelog.platform.log import CHECKPOINT_INTERVAL
from lakelog.settings import Settings
from lakelog.spark_jobs.jobs import run_job
from log_check import assert_topic_intact

PARTITIONS = 4


def produce(broker: Broker, topic: str, commits: int, tag: str) -> None:
    for i in range(commits):
        broker.produce(topic, [Record(f"{tag}-{i}-{p}".encode(), partition=p) for p in range(PARTITIONS)])


def only_the_checkpoint(table_path: Path, version: int) -> None:
    """Delete the commit files up to `version`: a reader can then only start from its checkpoint."""
    log_dir = table_path / "_delta_log"
    for name in os.listdir(log_dir):
        match = COMMIT_FILE.match(name)
        if match and int(match.group(1)) <= version:
            os.remove(log_dir / name)


def test_a_checkpoint_written_from_the_writers_state_is_read_by_delta_readers(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with Broker(Settings(root=str(root), linger_ms=0)) as broker:
        broker.create_topic("t", PARTITIONS)
        produce(broker, "t", 3 * CHECKPOINT_INTERVAL, "a")  # versions 1..75: checkpoints 25 (delta-rs), 50, 75
        topic_log = broker.topic_log("t")
        assert topic_log.wait_for_checkpoints()
        files = {s.path for p in range(PARTITIONS) for s in topic_log.segments(p)}
        ends = [topic_log.log_end_offset(p) for p in range(PARTITIONS)]
    table_path = root / "topics" / "t"
    only_the_checkpoint(table_path, 3 * CHECKPOINT_INTERVAL)
    table = DeltaTable(str(table_path))
    assert table.version() == 3 * CHECKPOINT_INTERVAL
    assert {os.path.basename(uri) for uri in table.file_uris()} == files
    assert [table.transaction_version(f"lakelog.partition.{p}") for p in range(PARTITIONS)] == ends == \
        [3 * CHECKPOINT_INTERVAL] * PARTITIONS
    values = table.to_pyarrow_table(columns=["value"]).column("value").to_pylist()
    assert sorted(values) == sorted(f"a-{i}-{p}".encode() for i in range(75) for p in range(PARTITIONS))
    table.create_checkpoint()  # delta-rs builds on it
    assert_topic_intact(str(root), "t")


def test_after_a_maintenance_commit_delta_rs_writes_the_next_checkpoint_and_the_one_after_is_ours_again(
        tmp_path: Path) -> None:
    """The reference: delta-rs's own replay of the commit files, in a copy of the table without the
    checkpoints lakelog wrote."""
    root = tmp_path / "root"
    with Broker(Settings(root=str(root), linger_ms=0)) as broker:
        broker.create_topic("t", PARTITIONS)
        produce(broker, "t", CHECKPOINT_INTERVAL + 5, "a")
        run_job("roll", broker, None)  # removes the shared files: a commit the writer loads through delta-rs
        produce(broker, "t", 2 * CHECKPOINT_INTERVAL, "b")
        topic_log = broker.topic_log("t")
        assert topic_log.wait_for_checkpoints()
        last = topic_log.version // CHECKPOINT_INTERVAL * CHECKPOINT_INTERVAL
    table_path = root / "topics" / "t"
    reference_path = tmp_path / "reference"
    shutil.copytree(table_path, reference_path)
    (reference_path / "_delta_log" / "_last_checkpoint").unlink()
    (reference_path / "_delta_log" / f"{last:020d}.checkpoint.parquet").unlink()  # ours: the one after delta-rs's
    reference = DeltaTable(str(reference_path), version=last)
    only_the_checkpoint(table_path, last)
    table = DeltaTable(str(table_path), version=last)
    assert sorted(os.path.basename(u) for u in table.file_uris()) == \
        sorted(os.path.basename(u) for u in reference.file_uris())
    assert [table.transaction_version(f"lakelog.partition.{p}") for p in range(PARTITIONS)] == \
        [reference.transaction_version(f"lakelog.partition.{p}") for p in range(PARTITIONS)]
    assert table.to_pyarrow_table().sort_by([("partition", "ascending"), ("offset", "ascending")]).equals(
        reference.to_pyarrow_table().sort_by([("partition", "ascending"), ("offset", "ascending")]))
    assert_topic_intact(str(root), "t")


@pytest.mark.s3
def test_a_checkpoint_after_the_first_reads_nothing_from_the_store(s3_proxy) -> None:
    root = s3_proxy.root()
    with Broker(Settings(root=root, storage=s3_proxy.options, linger_ms=0)) as broker:
        broker.create_topic("t", PARTITIONS)
        produce(broker, "t", 2 * CHECKPOINT_INTERVAL - 1, "a")  # up to version 49; the first checkpoint is delta-rs's
        topic_log = broker.topic_log("t")
        assert topic_log.wait_for_checkpoints()
        with s3_proxy.counter.measure() as counted:
            produce(broker, "t", 1, "b")  # version 50
            assert topic_log.wait_for_checkpoints()
        made = {kind: n for kind, n in counted.counts.items() if n and kind != "delete"}
        journal = [r for r in counted.requests if "/_journal/" in r.target]
        # The journal object (data; deleted once committed), the commit (data, log), the checkpoint and its
        # hint (log), the slices cache (data).
        assert len(journal) == 1 and made == {"put_data": 3, "put_log": 3}, counted.describe()
    assert_topic_intact(root, "t", s3_proxy.options)


def test_rows_that_cannot_be_built_leave_the_checkpoint_to_delta_rs(tmp_path: Path, monkeypatch) -> None:
    """A checkpoint schema lakelog cannot fill (say, a future delta-rs's) must not stop checkpoints: the log
    cleanup waits for them."""
    import pyarrow as pa

    from lakelog.platform.log import checkpoints

    def unknown_schema(*args: object) -> None:
        raise pa.ArrowInvalid("a checkpoint column this code does not know")

    monkeypatch.setattr(checkpoints, "checkpoint_rows", unknown_schema)
    root = tmp_path / "root"
    with Broker(Settings(root=str(root), linger_ms=0)) as broker:
        broker.create_topic("t", PARTITIONS)
        produce(broker, "t", 2 * CHECKPOINT_INTERVAL, "a")
        assert broker.topic_log("t").wait_for_checkpoints()
    only_the_checkpoint(root / "topics" / "t", 2 * CHECKPOINT_INTERVAL)
    table = DeltaTable(str(root / "topics" / "t"))
    assert table.version() == 2 * CHECKPOINT_INTERVAL
    assert table.to_pyarrow_table(columns=["value"]).num_rows == 2 * CHECKPOINT_INTERVAL * PARTITIONS
