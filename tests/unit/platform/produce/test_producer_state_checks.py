"""producer_state.ProducerStateManager: Kafka's idempotent-producer rules, over an in-memory history."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lakelog.platform.errors import DuplicateSequence, InvalidProducerEpoch, OutOfOrderSequence
from lakelog.platform.produce.producer_state import RECENT_BATCHES, ProducerStateManager
from lakelog.platform.records import ProduceResult, ProducerBatch


def result(*offsets: int) -> ProduceResult:
    n = len(offsets)
    return ProduceResult(np.zeros(n, np.int32), np.array(offsets, np.int64), np.zeros(n, np.int64))


def history(rows: list[tuple[int, int, int]]) -> pa.Table:
    """(epoch, sequence, offset) rows of producer 9 as the log would give them."""
    return pa.table({"partition": pa.array([0] * len(rows), pa.int32()),
                     "offset": pa.array([r[2] for r in rows], pa.int64()),
                     "timestamp": pa.array([0] * len(rows), pa.timestamp("ms", tz="UTC")),
                     "producer_epoch": pa.array([r[0] for r in rows], pa.int16()),
                     "sequence": pa.array([r[1] for r in rows], pa.int32())})


def manager(rows: list[tuple[int, int, int]] = ()) -> ProducerStateManager:
    return ProducerStateManager(lambda pid, content=False: history(list(rows)))


def test_a_new_producer_starts_where_it_says() -> None:
    assert manager().check(ProducerBatch(9, 0, 5), 1, {}) is None


def test_sequence_rules_after_a_batch() -> None:
    state = manager()
    state.record(ProducerBatch(9, 0, 0), 3, result(0, 1, 2))
    assert state.check(ProducerBatch(9, 0, 3), 1, {}) is None  # next
    with pytest.raises(OutOfOrderSequence, match="expected 3, got 5"):
        state.check(ProducerBatch(9, 0, 5), 1, {})
    retry = state.check(ProducerBatch(9, 0, 0), 3, {})
    assert retry is not None and retry.duplicate and retry.offsets.tolist() == [0, 1, 2]
    with pytest.raises(InvalidProducerEpoch):
        state.check(ProducerBatch(9, -1, 3), 1, {})
    with pytest.raises(OutOfOrderSequence, match="must start at sequence 0"):
        state.check(ProducerBatch(9, 1, 4), 1, {})
    assert state.check(ProducerBatch(9, 1, 0), 1, {}) is None


def test_batches_in_the_same_flush_count(monkeypatch: pytest.MonkeyPatch) -> None:
    state = manager()
    with pytest.raises(OutOfOrderSequence):
        state.check(ProducerBatch(9, 0, 7), 1, {9: (0, 4)})


def test_state_is_rebuilt_from_the_log_and_old_retries_found_there() -> None:
    state = manager([(0, 0, 10), (0, 1, 11), (0, 2, 12)])
    assert state.check(ProducerBatch(9, 0, 3), 1, {}) is None
    found = state.check(ProducerBatch(9, 0, 1), 2, {})
    assert found is not None and found.offsets.tolist() == [11, 12]


def test_a_retry_older_than_the_recent_batches_and_not_in_the_log() -> None:
    state = manager()
    for i in range(RECENT_BATCHES + 1):
        state.record(ProducerBatch(9, 0, i), 1, result(i))
    with pytest.raises(DuplicateSequence):
        state.check(ProducerBatch(9, 0, 0), 1, {})


@pytest.mark.parametrize("changed", [{9}, None], ids=["named", "any"])
def test_state_another_writer_changed_is_rebuilt_from_the_log(changed: set[int] | None) -> None:
    rows: list[tuple[int, int, int]] = []
    state = ProducerStateManager(lambda pid, content=False: history(rows))
    state.record(ProducerBatch(9, 0, 0), 1, result(0))
    rows += [(0, 0, 0), (0, 1, 1)]  # another writer committed sequence 1 meanwhile
    assert state.check(ProducerBatch(9, 0, 1), 1, {}) is None  # stale: would write it again
    state.forget_changed(changed)
    again = state.check(ProducerBatch(9, 0, 1), 1, {})
    assert again is not None and again.duplicate and again.offsets.tolist() == [1]


def test_forgetting_other_producers_keeps_this_ones_state() -> None:
    state = manager()
    state.record(ProducerBatch(9, 0, 0), 1, result(0))
    state.forget_changed({8})
    assert state.check(ProducerBatch(9, 0, 0), 1, {}).offsets.tolist() == [0]  # from the recent batches
