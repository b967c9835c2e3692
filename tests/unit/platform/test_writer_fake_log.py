"""writer.TopicWriter over a fake log: group commit, answers per caller, deadlines, failures (no storage)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pyarrow as pa
import pytest

from lakelog.platform.deadline import Deadline
from lakelog.platform.errors import (
    InvalidTimestamp,
    OutOfOrderSequence,
    ProducerStateChanged,
    RecordTooLarge,
    RequestTimedOut,
    StorageUnavailable,
)
from lakelog.platform.log import Appended
from lakelog.platform.producer_state import ProducerStateManager
from lakelog.platform.records import ProducerBatch, Record, records_to_columns
from lakelog.platform.topic_config import parse_topic_config
from lakelog.platform.topic_config import TimestampType
from lakelog.platform.writer import PendingProduce, TopicWriter


class FakeLog:
    """Assigns dense offsets per partition in memory; can be made to fail or to hang."""

    name = "fake"

    def __init__(self) -> None:
        self.ends: dict[int, int] = {}
        self.appends: list[pa.Table] = []
        self.fail: Exception | None = None
        self.release = threading.Event()
        self.release.set()

    def append(self, table: pa.Table, partitions: np.ndarray, deadline: Deadline,
               producer_ids: frozenset[int] = frozenset()) -> Appended:
        self.release.wait()
        if self.fail is not None:
            raise self.fail
        self.appends.append(table)
        offsets = np.empty(len(partitions), dtype=np.int64)
        for i, p in enumerate(partitions.tolist()):
            offsets[i] = self.ends.get(p, 0)
            self.ends[p] = offsets[i] + 1
        return Appended(offsets, len(self.appends))

    def take_changed_producers(self) -> set[int] | None:
        return set()  # the only writer

    def producer_history(self, producer_id: int, content: bool = False) -> pa.Table:
        return pa.table({"producer_epoch": pa.array([], pa.int16()), "sequence": pa.array([], pa.int32())})


CONFIGS = {TimestampType.CREATE_TIME: parse_topic_config({"max.message.bytes": 100}),
           TimestampType.LOG_APPEND_TIME: parse_topic_config({"message.timestamp.type": "LogAppendTime"})}


def pending(*values: bytes, partition: int = 0, ms: int = 5_000, producer: ProducerBatch | None = None,
            kind: TimestampType = TimestampType.CREATE_TIME, timestamp: int | None = None) -> PendingProduce:
    columns = records_to_columns([Record(v, timestamp_ms=timestamp) for v in values])
    return PendingProduce(columns, np.full(len(values), partition, dtype=np.int32), Deadline.after_ms(ms),
                          CONFIGS[kind], producer)


@pytest.fixture
def fake() -> FakeLog:
    return FakeLog()


@pytest.fixture
def writer(fake: FakeLog):
    w = TopicWriter(fake, linger_ms=30, batch_bytes=1 << 30, producers=ProducerStateManager(fake.producer_history))
    yield w
    fake.release.set()
    w.close()


def test_calls_within_the_linger_share_one_commit_and_get_their_own_offsets(writer: TopicWriter,
                                                                             fake: FakeLog) -> None:
    futures = [writer.submit(pending(b"a", b"b")), writer.submit(pending(b"c", partition=1)),
               writer.submit(pending(b"d"))]
    results = [f.result(5) for f in futures]
    assert len(fake.appends) == 1
    assert [r.offsets.tolist() for r in results] == [[0, 1], [0], [2]]
    assert [r.partitions.tolist() for r in results] == [[0, 0], [1], [0]]


def test_a_bad_record_fails_its_own_call_only_and_the_flush_builds_one_table(writer: TopicWriter,
                                                                           fake: FakeLog) -> None:
    futures = [writer.submit(pending(b"a")), writer.submit(pending(b"ok", b"x" * 101)),
               writer.submit(pending(b"b", timestamp=-1)), writer.submit(pending(b"c", partition=1))]
    assert futures[0].result(5).offsets.tolist() == [0]
    with pytest.raises(RecordTooLarge, match="record 1 is 101 bytes"):
        futures[1].result(5)
    with pytest.raises(InvalidTimestamp, match="record 0 has timestamp -1"):
        futures[2].result(5)
    assert futures[3].result(5).offsets.tolist() == [0]
    assert len(fake.appends) == 1
    assert fake.appends[0].column("value").to_pylist() == [b"a", b"c"]  # nothing of the refused calls


def test_log_append_time_is_stamped_per_call(writer: TopicWriter, fake: FakeLog) -> None:
    writer.submit(pending(b"x", kind=TimestampType.LOG_APPEND_TIME)).result(5)
    assert fake.appends[0].column("timestamp_type").to_pylist() == [1]


def test_producer_columns_are_stamped_with_sequences(writer: TopicWriter, fake: FakeLog) -> None:
    writer.submit(pending(b"a", b"b", producer=ProducerBatch(7, 2, 10))).result(5)
    table = fake.appends[0]
    assert table.column("producer_id").to_pylist() == [7, 7]
    assert table.column("producer_epoch").to_pylist() == [2, 2]
    assert table.column("sequence").to_pylist() == [10, 11]


def test_a_retried_batch_gets_the_original_answer_without_a_commit(writer: TopicWriter, fake: FakeLog) -> None:
    first = writer.submit(pending(b"a", producer=ProducerBatch(1, 0, 0))).result(5)
    again = writer.submit(pending(b"a", producer=ProducerBatch(1, 0, 0))).result(5)
    assert again.duplicate and again.offsets.tolist() == first.offsets.tolist()
    assert len(fake.appends) == 1


def test_a_retry_queued_in_the_same_flush_as_its_original_gets_the_original_answer(writer: TopicWriter,
                                                                                   fake: FakeLog) -> None:
    # A client that timed out retries through another node, which forwards to the leader while the
    # original still waits there: both reach one flush.
    fake.release.clear()
    writer.submit(pending(b"x"))  # holds the flush thread, so the next calls queue up together
    time.sleep(0.1)
    batch = ProducerBatch(1, 0, 0)
    original = writer.submit(pending(b"a", b"b", producer=batch))
    retry = writer.submit(pending(b"a", b"b", producer=batch))
    fake.release.set()
    first, again = original.result(5), retry.result(5)
    assert not first.duplicate and again.duplicate
    assert again.offsets.tolist() == first.offsets.tolist() == [1, 2]
    assert sum(t.num_rows for t in fake.appends) == 3  # "x", then "a" and "b" once


def test_an_append_error_fails_every_caller_of_the_flush(writer: TopicWriter, fake: FakeLog) -> None:
    fake.fail = StorageUnavailable("down")
    futures = [writer.submit(pending(b"a")), writer.submit(pending(b"b"))]
    for future in futures:
        with pytest.raises(StorageUnavailable):
            future.result(5)


def test_a_failing_producer_record_still_answers_with_offsets(writer: TopicWriter, fake: FakeLog,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("bookkeeping bug")

    monkeypatch.setattr(writer.producers, "record", broken)
    result = writer.submit(pending(b"a", producer=ProducerBatch(3, 0, 0))).result(5)
    assert result.offsets.tolist() == [0]


def test_a_call_past_its_deadline_is_not_written(writer: TopicWriter, fake: FakeLog) -> None:
    with pytest.raises(RequestTimedOut, match="nothing was written"):
        writer.submit(pending(b"late", ms=-1)).result(5)
    assert fake.appends == []


def test_a_stuck_commit_is_answered_at_the_deadline(writer: TopicWriter, fake: FakeLog) -> None:
    fake.release.clear()  # the storage call hangs
    future = writer.submit(pending(b"a", ms=50))
    time.sleep(0.2)
    assert writer.expire(time.monotonic()) == 1
    with pytest.raises(RequestTimedOut, match="outcome is unknown"):
        future.result(1)


def test_the_commit_notification_wakes_waiters(writer: TopicWriter) -> None:
    woke = threading.Event()

    def wait() -> None:
        with writer.committed:
            if writer.committed.wait(5):
                woke.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.05)
    writer.submit(pending(b"a")).result(5)
    waiter.join(5)
    assert woke.is_set()


class OtherWriterLog(FakeLog):
    """A log another writer commits to: producer 9's batch 0 lands there while our first attempt is in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.history = pa.table({"partition": pa.array([], pa.int32()), "offset": pa.array([], pa.int64()),
                                 "timestamp": pa.array([], pa.timestamp("ms")),
                                 "producer_epoch": pa.array([], pa.int16()), "sequence": pa.array([], pa.int32())})
        self.changed: set[int] = set()
        self.attempts: list[frozenset[int]] = []

    def append(self, table: pa.Table, partitions: np.ndarray, deadline: Deadline,
               producer_ids: frozenset[int] = frozenset()) -> Appended:
        self.attempts.append(producer_ids)
        if len(self.attempts) == 1:
            self.history = pa.table({"partition": pa.array([0], pa.int32()), "offset": pa.array([41], pa.int64()),
                                     "timestamp": pa.array([5], pa.timestamp("ms")),
                                     "producer_epoch": pa.array([0], pa.int16()),
                                     "sequence": pa.array([0], pa.int32())})
            self.changed = {9}
            raise ProducerStateChanged("the other writer committed producer 9", {9})
        return super().append(table, partitions, deadline)

    def take_changed_producers(self) -> set[int] | None:
        changed, self.changed = self.changed, set()
        return changed

    def producer_history(self, producer_id: int, content: bool = False) -> pa.Table:
        return self.history if producer_id == 9 else self.history.slice(0, 0)


def test_a_batch_another_writer_committed_meanwhile_is_answered_from_the_log_not_written() -> None:
    fake = OtherWriterLog()
    w = TopicWriter(fake, linger_ms=30, batch_bytes=1 << 30, producers=ProducerStateManager(fake.producer_history))
    try:
        retried = w.submit(pending(b"a", producer=ProducerBatch(9, 0, 0)))
        other = w.submit(pending(b"b", producer=ProducerBatch(8, 0, 0)))
        plain = w.submit(pending(b"c"))
        result = retried.result(5)
        assert result.duplicate and result.offsets.tolist() == [41]
        assert other.result(5).offsets.tolist() == [0] and plain.result(5).offsets.tolist() == [1]
        assert fake.attempts == [frozenset({8, 9}), frozenset({8})]  # checked again, then without the retry
        assert [t.num_rows for t in fake.appends] == [2]
    finally:
        w.close()


class BehindLog(FakeLog):
    """Another writer has committed producer 9's sequences 0..4; this node learns it only on refresh."""

    def __init__(self) -> None:
        super().__init__()
        self.refreshes = 0
        self.history = pa.table({"partition": pa.array([], pa.int32()), "offset": pa.array([], pa.int64()),
                                 "timestamp": pa.array([], pa.timestamp("ms")),
                                 "producer_epoch": pa.array([], pa.int16()), "sequence": pa.array([], pa.int32())})

    def refresh(self) -> bool:
        self.refreshes += 1
        self.history = pa.table({"partition": pa.array([0] * 5, pa.int32()), "offset": pa.array(range(5), pa.int64()),
                                 "timestamp": pa.array([5] * 5, pa.timestamp("ms")),
                                 "producer_epoch": pa.array([0] * 5, pa.int16()),
                                 "sequence": pa.array(range(5), pa.int32())})
        self.ends[0] = 5
        return True

    def take_changed_producers(self) -> set[int] | None:
        return {9} if self.refreshes else set()

    def producer_history(self, producer_id: int, content: bool = False) -> pa.Table:
        return self.history if producer_id == 9 else self.history.slice(0, 0)


def test_a_sequence_gap_seen_on_a_stale_view_is_judged_again_on_the_refreshed_log() -> None:
    fake = BehindLog()
    w = TopicWriter(fake, linger_ms=30, batch_bytes=1 << 30, producers=ProducerStateManager(fake.producer_history))
    try:
        assert w.submit(pending(b"a", producer=ProducerBatch(9, 0, 0))).result(5).duplicate is False
        # this node's state now expects sequence 1; the log (another node) holds up to 4
        result = w.submit(pending(b"f", producer=ProducerBatch(9, 0, 5))).result(5)
        assert fake.refreshes == 1 and result.offsets.tolist() == [5]
        with pytest.raises(OutOfOrderSequence):  # a real gap stays a gap, after one more look
            w.submit(pending(b"h", producer=ProducerBatch(9, 0, 9))).result(5)
        assert fake.refreshes == 2
    finally:
        w.close()


class KeyWrittenElsewhereLog(BehindLog):
    """On refresh, the log also shows producer 11's batch (sequence 0), written by another node."""

    def producer_history(self, producer_id: int, content: bool = False) -> pa.Table:
        if producer_id == 11 and self.refreshes:
            return pa.table({"partition": pa.array([1], pa.int32()), "offset": pa.array([0], pa.int64()),
                             "timestamp": pa.array([5], pa.timestamp("ms")),
                             "producer_epoch": pa.array([0], pa.int16()), "sequence": pa.array([0], pa.int32())})
        return super().producer_history(producer_id, content)

    def take_changed_producers(self) -> set[int] | None:
        return {9, 11} if self.refreshes else set()


def test_a_refresh_for_one_producer_judges_the_calls_accepted_before_it_again() -> None:
    fake = KeyWrittenElsewhereLog()
    w = TopicWriter(fake, linger_ms=50, batch_bytes=1 << 30, producers=ProducerStateManager(fake.producer_history))
    try:
        assert w.submit(pending(b"a", producer=ProducerBatch(9, 0, 0))).result(5).duplicate is False
        retried_elsewhere = w.submit(pending(b"k", producer=ProducerBatch(11, 0, 0)))  # accepted on the stale view
        behind = w.submit(pending(b"f", producer=ProducerBatch(9, 0, 5)))  # the gap that refreshes the log
        assert retried_elsewhere.result(5).duplicate and retried_elsewhere.result(5).offsets.tolist() == [0]
        assert behind.result(5).offsets.tolist() == [5]
        assert [t.num_rows for t in fake.appends] == [1, 1]  # producer 11's batch was not written again
    finally:
        w.close()
