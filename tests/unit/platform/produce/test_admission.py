"""admission.py: which produce calls of a flush go on (bad records, deadlines, idempotent retries, producers
another node wrote), over a fake log (no storage). The node journal's flush calls it (journal/writer.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lakelog.platform.produce.admission import PendingProduce, ProducerAdmission, checked
from lakelog.platform.deadline import Deadline
from lakelog.platform.errors import InvalidTimestamp, OutOfOrderSequence, RecordTooLarge, RequestTimedOut
from lakelog.platform.produce.producer_state import ProducerStateManager
from lakelog.platform.records import ProduceResult, ProducerBatch, Record, records_to_columns
from lakelog.platform.catalog.topic_config import parse_topic_config

CONFIG = parse_topic_config({"max.message.bytes": 100})


def no_history() -> pa.Table:
    return pa.table({"partition": pa.array([], pa.int32()), "offset": pa.array([], pa.int64()),
                     "timestamp": pa.array([], pa.timestamp("ms")),
                     "producer_epoch": pa.array([], pa.int16()), "sequence": pa.array([], pa.int32())})


def history(partition: int, sequences: range, first_offset: int = 0) -> pa.Table:
    n = len(sequences)
    return pa.table({"partition": pa.array([partition] * n, pa.int32()),
                     "offset": pa.array(range(first_offset, first_offset + n), pa.int64()),
                     "timestamp": pa.array([5] * n, pa.timestamp("ms")),
                     "producer_epoch": pa.array([0] * n, pa.int16()), "sequence": pa.array(sequences, pa.int32())})


class FakeLog:
    """Producer history per producer id; `on_refresh` is what another node wrote, seen once refreshed."""

    name = "fake"

    def __init__(self, on_refresh: dict[int, pa.Table] | None = None) -> None:
        self.histories: dict[int, pa.Table] = {}
        self.on_refresh = on_refresh or {}
        self.refreshes = 0

    def refresh(self) -> bool:
        self.refreshes += 1
        self.histories.update(self.on_refresh)
        return True

    def take_changed_producers(self) -> set[int] | None:
        return set(self.on_refresh) if self.refreshes else set()

    def producer_history(self, producer_id: int, content: bool = False) -> pa.Table:
        return self.histories.get(producer_id, no_history())


def pending(*values: bytes, ms: int = 5_000, producer: ProducerBatch | None = None,
            timestamp: int | None = None) -> PendingProduce:
    columns = records_to_columns([Record(v, timestamp_ms=timestamp) for v in values])
    return PendingProduce(columns, np.zeros(len(values), dtype=np.int32), Deadline.after_ms(ms), CONFIG, producer)


def admission(log: FakeLog) -> ProducerAdmission:
    return ProducerAdmission(log, ProducerStateManager(log.producer_history))  # type: ignore[arg-type]


def written(gate: ProducerAdmission, calls: list[PendingProduce], first_offset: int) -> list[ProduceResult]:
    """What the journal's flush does after admitting: offsets assigned in order, producers recorded."""
    results, offset = [], first_offset
    for call in calls:
        n = call.rows
        results.append(ProduceResult(np.zeros(n, np.int32), np.arange(offset, offset + n), np.zeros(n, np.int64)))
        offset += n
    gate.record_producers(calls, results)
    for call, result in zip(calls, results):
        call.future.set_result(result)
    return results


def test_a_bad_record_fails_its_own_call_only_naming_the_record() -> None:
    calls = [pending(b"a"), pending(b"ok", b"x" * 101), pending(b"b", timestamp=-1), pending(b"c")]
    kept = checked(calls, "fake")
    assert kept == [calls[0], calls[3]]
    with pytest.raises(RecordTooLarge, match="record 1 is 101 bytes"):
        calls[1].future.result(0)
    with pytest.raises(InvalidTimestamp, match="record 0 has timestamp -1"):
        calls[2].future.result(0)
    assert [c.table.column("value").to_pylist() for c in kept] == [[b"a"], [b"c"]]  # type: ignore[union-attr]


def test_a_call_past_its_deadline_is_not_admitted() -> None:
    gate = admission(FakeLog())
    late = pending(b"late", ms=-1)
    assert gate.admit(checked([late], "fake"), lambda: None) == []
    with pytest.raises(RequestTimedOut, match="nothing was written"):
        late.future.result(0)


def test_a_retried_batch_gets_the_original_answer_and_is_not_admitted() -> None:
    gate = admission(FakeLog())
    original = pending(b"a", producer=ProducerBatch(1, 0, 0))
    assert gate.admit(checked([original], "fake"), lambda: None) == [original]
    first = written(gate, [original], first_offset=7)[0]
    retry = pending(b"a", producer=ProducerBatch(1, 0, 0))
    assert gate.admit(checked([retry], "fake"), lambda: None) == []
    again = retry.future.result(0)
    assert again.duplicate and again.offsets.tolist() == first.offsets.tolist() == [7]


def test_a_retry_in_the_same_flush_as_its_original_follows_its_answer() -> None:
    # A client that timed out retries through another node, which forwards to the leader while the original
    # still waits there: both reach one flush.
    gate = admission(FakeLog())
    batch = ProducerBatch(1, 0, 0)
    original, retry = pending(b"a", b"b", producer=batch), pending(b"a", b"b", producer=batch)
    assert gate.admit(checked([original, retry], "fake"), lambda: None) == [original]
    assert not retry.future.done()
    written(gate, [original], first_offset=1)
    again = retry.future.result(0)
    assert again.duplicate and again.offsets.tolist() == [1, 2]


def test_a_sequence_gap_on_a_stale_view_is_judged_again_on_the_refreshed_log() -> None:
    log = FakeLog(on_refresh={9: history(0, range(5))})  # another node wrote producer 9's sequences 0..4
    gate = admission(log)
    first = pending(b"a", producer=ProducerBatch(9, 0, 0))
    assert gate.admit(checked([first], "fake"), lambda: None) == [first]
    written(gate, [first], first_offset=0)
    caught_up: list[bool] = []
    behind = pending(b"f", producer=ProducerBatch(9, 0, 5))  # a gap on this node's view, none on the log's
    assert gate.admit(checked([behind], "fake"), lambda: caught_up.append(True)) == [behind]
    assert log.refreshes == 1 and caught_up == [True]
    gap = pending(b"h", producer=ProducerBatch(9, 0, 9))  # a real gap stays a gap, after one more look
    assert gate.admit(checked([gap], "fake"), lambda: None) == []
    with pytest.raises(OutOfOrderSequence):
        gap.future.result(0)
    assert log.refreshes == 2


def test_a_refresh_for_one_producer_judges_the_calls_admitted_before_it_again() -> None:
    # On refresh the log also shows producer 11's batch (sequence 0), written by another node.
    log = FakeLog(on_refresh={9: history(0, range(5)), 11: history(1, range(1))})
    gate = admission(log)
    first = pending(b"a", producer=ProducerBatch(9, 0, 0))
    gate.admit(checked([first], "fake"), lambda: None)
    written(gate, [first], first_offset=0)
    elsewhere = pending(b"k", producer=ProducerBatch(11, 0, 0))  # admitted on the stale view, at first
    behind = pending(b"f", producer=ProducerBatch(9, 0, 5))  # the gap that refreshes the log
    assert gate.admit(checked([elsewhere, behind], "fake"), lambda: None) == [behind]
    answer = elsewhere.future.result(0)
    assert answer.duplicate and answer.offsets.tolist() == [0]  # not written again
