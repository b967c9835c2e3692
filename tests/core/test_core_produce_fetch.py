"""Produce and fetch through the core API, on a local folder and on the S3 endpoint."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from lakelog.platform import Broker, ProducerBatch, Record
from lakelog.platform.errors import (
    InvalidProducerEpoch,
    OffsetOutOfRange,
    OutOfOrderSequence,
    UnknownTopicOrPartition,
)
from lakelog.platform.log import partition_app_id
from lakelog.platform.partitioner import partition_for_key


def _values(result) -> list[bytes]:
    return [r.value for r in result]


def test_round_trip_keys_values_headers_and_dense_offsets(broker: Broker) -> None:
    broker.create_topic("orders", 3)
    sent = [Record(f"v{i}".encode(), key=f"k{i % 7}".encode(), headers=[("h", bytes([i % 256]))]) for i in range(60)]
    result = broker.produce("orders", sent)
    assert len(result) == 60
    for record, (partition, _, _) in zip(sent, result.records()):
        assert partition == partition_for_key(record.key, 3)
    for p in range(3):
        mine = [(o, r) for r, (pp, o, _) in zip(sent, result.records()) if pp == p]
        assert [o for o, _ in mine] == list(range(len(mine)))  # dense from 0, in request order
        fetched = list(broker.fetch("orders", p, 0, max_records=1000))
        assert [(f.offset, f.key, f.value, f.headers) for f in fetched] == [
            (o, r.key, r.value, list(r.headers)) for o, r in mine
        ]


def test_fetch_from_middle_respects_max_records_and_max_bytes(broker: Broker) -> None:
    broker.create_topic("t", 1)
    for batch in range(4):  # several files
        broker.produce("t", [Record(b"x" * 100, key=None, partition=0) for _ in range(25)])
    middle = broker.fetch("t", 0, 37, max_records=10)
    assert [r.offset for r in middle] == list(range(37, 47))
    limited = broker.fetch("t", 0, 0, max_records=100, max_bytes=450)
    assert [r.offset for r in limited] == [0, 1, 2, 3]
    assert [r.offset for r in broker.fetch("t", 0, 0, max_records=100, max_bytes=1)] == [0]  # always one
    assert broker.fetch("t", 0, 100).records.num_rows == 0  # at the log end: empty, not an error


def test_offsets_out_of_range_and_unknown_partition(broker: Broker) -> None:
    broker.create_topic("t", 2)
    broker.produce("t", [Record(b"a", partition=0)])
    with pytest.raises(OffsetOutOfRange) as info:
        broker.fetch("t", 0, 2)
    assert (info.value.log_start_offset, info.value.log_end_offset) == (0, 1)
    with pytest.raises(OffsetOutOfRange):
        broker.fetch("t", 0, -1)
    with pytest.raises(UnknownTopicOrPartition):
        broker.fetch("t", 2, 0)
    with pytest.raises(UnknownTopicOrPartition):
        broker.fetch("nope", 0, 0)


def test_list_offsets_earliest_latest_and_by_timestamp(broker: Broker) -> None:
    broker.create_topic("t", 1)
    base = 1_700_000_000_000
    for i in range(3):
        broker.produce("t", [Record(b"v", partition=0, timestamp_ms=base + i * 1000 + j) for j in range(5)])
    assert broker.list_offset("t", 0, "earliest") == 0
    assert broker.list_offset("t", 0, "latest") == 15
    assert broker.list_offset("t", 0, base + 1000) == 5
    assert broker.list_offset("t", 0, base + 1003) == 8
    assert broker.list_offset("t", 0, base - 10) == 0
    assert broker.list_offset("t", 0, base + 99_999) == 15  # none at or after: the log end


def test_log_append_time_overrides_client_timestamps(broker: Broker) -> None:
    broker.create_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    broker.produce("t", [Record(b"v", partition=0, timestamp_ms=5)])
    (record,) = list(broker.fetch("t", 0, 0))
    assert record.timestamp_ms >= before and record.timestamp_type == 1


def test_arrow_batch_form(broker: Broker) -> None:
    broker.create_topic("t", 4)
    table = pa.table({
        "key": pa.array([f"k{i}" for i in range(1000)]),
        "value": pa.array([f"v{i}".encode() for i in range(1000)], pa.binary()),
        "timestamp": pa.array([1_700_000_000_000 + i for i in range(1000)], pa.int64()),
    })
    result = broker.produce("t", table)
    by_partition: dict[int, list[int]] = {}
    for i, (p, o, ts) in enumerate(result.records()):
        assert p == partition_for_key(f"k{i}".encode(), 4)
        assert ts == 1_700_000_000_000 + i
        by_partition.setdefault(p, []).append(o)
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())
    fetched = {r.value for p in range(4) for r in broker.fetch("t", p, 0, max_records=5000)}
    assert fetched == {f"v{i}".encode() for i in range(1000)}


def test_acks_zero_returns_at_once_and_the_record_lands(broker: Broker) -> None:
    broker.create_topic("t", 1)
    result = broker.produce("t", [Record(b"fire-and-forget", partition=0)], acks=0)
    assert result.offsets.tolist() == [-1]
    broker.flush()
    assert _values(broker.fetch("t", 0, 0)) == [b"fire-and-forget"]
    assert broker.produce("t", [Record(b"b", partition=0)], acks="all").offsets.tolist() == [1]


def test_log_end_offset_is_the_delta_set_transaction(broker: Broker) -> None:
    broker.create_topic("t", 2)
    broker.produce("t", [Record(b"x", partition=1) for _ in range(7)])
    reopened = Broker(broker.settings)
    try:
        dt = reopened.topic_log("t").snapshot.delta_table
        assert dt.transaction_version(partition_app_id(1)) == 7
        assert dt.transaction_version(partition_app_id(0)) is None
        assert reopened.list_offset("t", 1, "latest") == 7
    finally:
        reopened.close()


def test_idempotent_producer_retry_gap_fence_and_restart(make_broker) -> None:
    broker = make_broker()
    broker.create_topic("t", 3)
    records = [Record(f"v{i}".encode(), key=f"k{i}".encode()) for i in range(5)]
    first = broker.produce("t", records, producer=ProducerBatch(42, 0, 0))
    retry = broker.produce("t", records, producer=ProducerBatch(42, 0, 0))
    assert retry.duplicate and retry.records() == first.records()
    with pytest.raises(OutOfOrderSequence):
        broker.produce("t", records[:1], producer=ProducerBatch(42, 0, 7))  # expected 5
    second = broker.produce("t", records[:2], producer=ProducerBatch(42, 0, 5))
    assert not second.duplicate
    broker.close()

    restarted = make_broker()  # state rebuilt from the log
    again = restarted.produce("t", records[:2], producer=ProducerBatch(42, 0, 5))
    assert again.duplicate and again.records() == second.records()
    newer = restarted.produce("t", records[:1], producer=ProducerBatch(42, 1, 0))  # a new epoch starts at 0
    with pytest.raises(InvalidProducerEpoch):
        restarted.produce("t", records[:1], producer=ProducerBatch(42, 0, 7))  # fenced
    restarted.close()

    third = make_broker()
    assert third.produce("t", records[:1], producer=ProducerBatch(42, 1, 0)).records() == newer.records()
    with pytest.raises(InvalidProducerEpoch):
        third.produce("t", records[:1], producer=ProducerBatch(42, 0, 7))
    restarted = third
    total = sum(restarted.list_offset("t", p, "latest") for p in range(3))
    assert total == 5 + 2 + 1


def test_producer_sequence_must_continue_after_restart(make_broker) -> None:
    broker = make_broker()
    broker.create_topic("t", 1)
    broker.produce("t", [Record(b"a"), Record(b"b")], producer=ProducerBatch(9, 3, 0))
    broker.close()
    restarted = make_broker()
    with pytest.raises(OutOfOrderSequence):
        restarted.produce("t", [Record(b"c")], producer=ProducerBatch(9, 3, 5))
    assert restarted.produce("t", [Record(b"c")], producer=ProducerBatch(9, 3, 2)).offsets.tolist() == [2]


def test_many_concurrent_callers_share_flushes(broker: Broker) -> None:
    broker.create_topic("t", 2)
    futures = [broker.produce_async("t", [Record(f"{i}".encode(), partition=i % 2)]) for i in range(200)]
    results = [f.result() for f in futures]
    for p in range(2):
        offsets = sorted(int(r.offsets[0]) for r in results if r.partitions[0] == p)
        assert offsets == list(range(100))
    log = broker.topic_log("t")
    assert log.commits < 200  # group commit: fewer commits than calls


def test_records_survive_reopen_and_partitions_can_grow(make_broker) -> None:
    broker = make_broker()
    broker.create_topic("t", 1)
    broker.produce("t", [Record(b"old", partition=0)])
    broker.add_partitions("t", 3)
    broker.produce("t", [Record(b"new", partition=2)])
    broker.close()
    reopened = make_broker()
    assert _values(reopened.fetch("t", 0, 0)) == [b"old"]
    assert _values(reopened.fetch("t", 2, 0)) == [b"new"]
    assert reopened.describe_topic("t").meta.partitions == 3


def test_long_poll_waits_for_min_bytes(broker: Broker) -> None:
    import threading

    broker.create_topic("t", 1)
    broker.produce("t", [Record(b"x" * 10, partition=0)])
    assert broker.fetch("t", 0, 0, min_bytes=1).records.num_rows == 1  # enough at once
    timer = threading.Timer(0.3, lambda: broker.produce("t", [Record(b"y" * 100, partition=0)]))
    timer.start()
    result = broker.fetch("t", 0, 0, max_records=10, timeout_ms=20_000, min_bytes=50)
    timer.join()
    assert [r.value for r in result] == [b"x" * 10, b"y" * 100]  # waited for the second record
    short = broker.fetch("t", 0, 0, max_records=10, timeout_ms=200, min_bytes=10_000)
    assert short.records.num_rows == 2  # the deadline answers with what there is
