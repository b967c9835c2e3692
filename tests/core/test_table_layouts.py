"""Both topic table layouts on a local root. Layout 2 (every new topic): a flush is one file shared by its
partitions; a node that did not write it (here: after a restart) indexes it from its footer; the roll
rewrites shared files into per-partition files in one commit, and no commit may drop a shared file
with some of its partitions' records left. Layout 1 (tables created before): still read and written."""

from __future__ import annotations

import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.errors import InvalidRequest
from lakelog.platform.log import TopicLog
from lakelog.platform.segments.segment import TableLayout
from lakelog.settings import Settings
from lakelog.spark_jobs.jobs import run_job
from delta_readers import assert_duckdb_agrees
from log_check import assert_topic_intact

PARTITIONS = 3


def produce(broker: Broker, topic: str, flushes: int) -> dict[int, list[bytes]]:
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for f in range(flushes):
        records = [Record(f"{f}-{i}".encode(), partition=i % PARTITIONS) for i in range(7)]
        broker.produce(topic, records)
        for r in records:
            sent[r.partition].append(r.value)
    return sent


def acknowledged(sent: dict[int, list[bytes]]) -> dict[tuple[int, int], bytes]:
    """Each value at its offset: a partition's offsets start at 0 in the order produced."""
    return {(p, o): value for p, values in sent.items() for o, value in enumerate(values)}


def values(broker: Broker, topic: str) -> dict[int, list[bytes]]:
    return {p: broker.fetch(topic, p, 0, max_records=10_000).records.column("value").to_pylist()
            for p in range(PARTITIONS)}


def test_a_restarted_node_indexes_shared_files_from_their_footers(tmp_path) -> None:
    root = str(tmp_path / "data")
    with Broker(Settings(root=root, tail_cache_bytes=0)) as broker:
        broker.create_topic("t", PARTITIONS)
        sent = produce(broker, "t", 4)
        written = {p: broker.topic_log("t").segments(p) for p in range(PARTITIONS)}
        assert broker.topic_log("t").layout is TableLayout.INTAKE
        assert all(s.shared for p in written for s in written[p])
    with Broker(Settings(root=root, tail_cache_bytes=0)) as restarted:
        assert {p: restarted.topic_log("t").segments(p) for p in range(PARTITIONS)} == written
        assert values(restarted, "t") == sent
    assert_topic_intact(root, "t")
    assert_duckdb_agrees(root, "t", acked=acknowledged(sent))  # shared files, read by another Delta reader


def test_the_roll_splits_shared_files_and_a_partial_removal_is_refused(tmp_path) -> None:
    root = str(tmp_path / "data")
    with Broker(Settings(root=root)) as broker:
        broker.create_topic("t", PARTITIONS)
        sent = produce(broker, "t", 5)
        topic_log = broker.topic_log("t")
        version = topic_log.version
        with pytest.raises(InvalidRequest, match="several partitions"):
            topic_log.commit_file_changes([], topic_log.segments(0)[:1], data_change=False)
        assert topic_log.version == version and values(broker, "t") == sent

        report = run_job("roll", broker)
        assert report.commits == 1 and report.files_removed == 5 and report.files_added == PARTITIONS
        after = {p: topic_log.segments(p) for p in range(PARTITIONS)}
        assert all(len(after[p]) == 1 and not after[p][0].shared for p in after)
        assert values(broker, "t") == sent
    assert_topic_intact(root, "t")
    assert_duckdb_agrees(root, "t", acked=acknowledged(sent))  # after the roll's OPTIMIZE commit


def test_a_layout_1_table_keeps_working(tmp_path) -> None:
    root = str(tmp_path / "data")
    with Broker(Settings(root=root)) as broker:
        TopicLog.create_table(broker.storage, "old", TableLayout.PARTITIONED)  # as lakelog created tables before
        broker.create_topic("old", PARTITIONS)  # reuses the empty table
        topic_log = broker.topic_log("old")
        assert topic_log.layout is TableLayout.PARTITIONED
        sent = produce(broker, "old", 3)
        assert all(s.path.startswith(f"partition={p}/") for p in range(PARTITIONS) for s in topic_log.segments(p))
        assert run_job("roll", broker).commits == 0  # small young files of one partition each: nothing due
        assert values(broker, "old") == sent
    assert_topic_intact(root, "old")
    assert_duckdb_agrees(root, "old", acked=acknowledged(sent))  # the partition comes from the file's path
