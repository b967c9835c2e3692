"""Offsets stay unique whatever the input and whatever fails after a commit (issue: hardening, item 1).

Regression tests for one bad timestamp breaking offset uniqueness: the commit landed, the bookkeeping
after it raised, the node reused the log end offset and every caller of the flush got an error.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakelog.platform import Broker
from lakelog.platform.errors import InvalidTimestamp, StorageWriteFailed
from lakelog.platform.log import commit as commit_module
from lakelog.platform.log.commit import Appender
from lakelog.platform.log.snapshot import LogSnapshot
from lakelog.platform.records import MAX_TIMESTAMP_MS, Record
from log_check import assert_topic_intact, topic_offsets


@pytest.mark.parametrize("timestamp", [MAX_TIMESTAMP_MS + 1, 2**53, 2**62, 2**63 - 1])
def test_timestamp_beyond_the_storable_range_is_refused_and_changes_nothing(broker: Broker, timestamp: int) -> None:
    broker.create_topic("t", 1)
    with pytest.raises(InvalidTimestamp, match=f"record 1 has timestamp {timestamp} ms.*{MAX_TIMESTAMP_MS}"):
        broker.produce("t", [Record(b"ok"), Record(b"x", timestamp_ms=timestamp)])
    assert broker.topic_log("t").log_end_offset(0) == 0
    assert broker.produce("t", [Record(b"y")]).offsets.tolist() == [0]
    assert topic_offsets(broker.settings.root, "t", broker.settings.storage) == {0: [0]}


def test_the_largest_storable_timestamp_round_trips(broker: Broker) -> None:
    broker.create_topic("t", 1)
    broker.produce("t", [Record(b"last", timestamp_ms=MAX_TIMESTAMP_MS), Record(b"first", timestamp_ms=0)])
    assert [(r.offset, r.timestamp_ms) for r in broker.fetch("t", 0, 0)] == [(0, MAX_TIMESTAMP_MS), (1, 0)]
    assert broker.list_offset("t", 0, MAX_TIMESTAMP_MS) == 0
    assert_topic_intact(broker.settings.root, "t", broker.settings.storage)


def test_kafka_timestamp_difference_limits(local_broker: Broker) -> None:
    hour = 3_600_000
    local_broker.create_topic("t", 1, {"message.timestamp.before.max.ms": hour,
                                       "message.timestamp.after.max.ms": hour})
    now = int(time.time() * 1000)
    with pytest.raises(InvalidTimestamp, match="message.timestamp.before.max.ms"):
        local_broker.produce("t", [Record(b"old", timestamp_ms=now - 2 * hour)])
    with pytest.raises(InvalidTimestamp, match="message.timestamp.after.max.ms"):
        local_broker.produce("t", [Record(b"future", timestamp_ms=now + 2 * hour)])
    assert local_broker.produce("t", [Record(b"recent", timestamp_ms=now - hour // 2)]).offsets.tolist() == [0]
    # LogAppendTime replaces the client's timestamp, so Kafka does not check it; neither does lakelog.
    local_broker.create_topic("appended", 1, {"message.timestamp.type": "LogAppendTime"})
    result = local_broker.produce("appended", [Record(b"x", timestamp_ms=MAX_TIMESTAMP_MS + 1)])
    assert abs(int(result.timestamps_ms[0]) - now) < 60_000


def test_a_failure_after_the_commit_answers_every_caller_and_reuses_no_offset(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """The post-commit step raises once, in a flush that holds several callers' records."""
    broker.create_topic("t", 2)
    failed = threading.Event()
    real = Appender._own_commit

    def fail_once(self: Appender, *args: object) -> None:
        if not failed.is_set():
            failed.set()
            raise KeyError("bookkeeping broke after the commit")
        real(self, *args)

    monkeypatch.setattr(Appender, "_own_commit", fail_once)
    first = [Record(f"a{i}".encode(), partition=i % 2) for i in range(4)]
    with ThreadPoolExecutor(4) as pool:  # four callers, one flush (linger) or a few: all answered
        answers = list(pool.map(lambda _: broker.produce("t", first), range(4)))
    assert failed.is_set()
    offsets = sorted((p, o) for a in answers for p, o, _ in a.records())
    assert offsets == sorted((p, o) for p in (0, 1) for o in range(8))
    later = broker.produce("t", [Record(b"b", partition=0), Record(b"c", partition=1)])
    assert later.offsets.tolist() == [8, 8]
    stored = assert_topic_intact(broker.settings.root, "t", broker.settings.storage)
    assert {p: len(o) for p, o in stored.items()} == {0: 9, 1: 9}


def test_a_failure_after_the_commit_in_the_index_too_still_reuses_no_offset(
        local_broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both the incremental bookkeeping and the index rebuild raise: the offsets come from SetTransactions."""
    local_broker.create_topic("t", 1)
    local_broker.produce("t", [Record(b"a")])
    broken = {"on": True}
    real_after, real_rebuild = Appender._own_commit, LogSnapshot._rebuild_index

    def after(self: Appender, *args: object) -> None:
        if broken["on"]:
            raise ValueError("stats could not be parsed")
        real_after(self, *args)

    def rebuild(self: LogSnapshot) -> None:
        if broken["on"]:
            raise ValueError("index could not be rebuilt")
        real_rebuild(self)

    monkeypatch.setattr(Appender, "_own_commit", after)
    monkeypatch.setattr(LogSnapshot, "_rebuild_index", rebuild)
    assert local_broker.produce("t", [Record(b"b")]).offsets.tolist() == [1]
    assert local_broker.produce("t", [Record(b"c")]).offsets.tolist() == [2]
    broken["on"] = False
    assert local_broker.produce("t", [Record(b"d")]).offsets.tolist() == [3]
    assert [r.value for r in local_broker.fetch("t", 0, 0)] == [b"a", b"b", b"c", b"d"]
    assert_topic_intact(local_broker.settings.root, "t")


def test_a_storage_error_that_cannot_pass_fails_the_flush_once(
        local_broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    local_broker.create_topic("t", 1)
    calls = []
    real = commit_module.write_segments

    def refuse(*args: object, **kwargs: object) -> None:
        calls.append(1)
        raise pa.ArrowInvalid("Cast error: Failed to convert into Arrow schema")

    # A direct table append (the exactly-once door's): the journal's table commits go through the same append.
    monkeypatch.setattr(commit_module, "write_segments", refuse)
    started = time.monotonic()
    with pytest.raises(StorageWriteFailed, match="Cast error"):
        local_broker.append_exactly_once("t", pa.table({"value": [b"x"]}), "app", 1, timeout_ms=20_000)
    assert len(calls) == 1 and time.monotonic() - started < 10  # not retried until the deadline
    monkeypatch.setattr(commit_module, "write_segments", real)
    assert local_broker.append_exactly_once("t", pa.table({"value": [b"y"]}), "app", 1).offsets.tolist() == [0]
    assert_topic_intact(local_broker.settings.root, "t")


def test_the_integrity_check_finds_duplicates_and_gaps(local_broker: Broker) -> None:
    """The shared helper fails on a table holding an offset twice or missing one."""
    local_broker.create_topic("t", 1)
    local_broker.produce("t", [Record(b"a"), Record(b"b"), Record(b"c")])
    root = local_broker.settings.root
    assert_topic_intact(root, "t")
    rows = local_broker.topic_log("t").read(0, 1, 1)  # offset 1 again, as a second file
    write_deltalake(f"{root}/topics/t", rows, mode="append")
    with pytest.raises(AssertionError, match=r"t-0: duplicate offsets \[1\]"):
        assert_topic_intact(root, "t")
    beyond = rows.set_column(rows.schema.get_field_index("offset"), "offset", pa.array([5], pa.int64()))
    write_deltalake(f"{root}/topics/t", beyond, mode="append")
    with pytest.raises(AssertionError, match=r"last offset 5 but log end offset 3.*missing offsets \[3, 4\]"):
        assert_topic_intact(root, "t")
