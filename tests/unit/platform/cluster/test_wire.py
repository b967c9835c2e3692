"""The node-to-node produce call: calls survive the trip, answers come back per call, errors keep their type."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakelog.platform import errors as core
from lakelog.platform.cluster.errors import RemoteError
from lakelog.platform.cluster.wire import ForwardedCall, decode_calls, decode_results, encode_calls, encode_results
from lakelog.platform.records import ProduceResult, ProducerBatch, RecordColumns, columns_to_table


def _call(values: list[bytes], partitions: list[int], acks: int = 1, producer: ProducerBatch | None = None,
          headers: list | None = None) -> ForwardedCall:
    columns = RecordColumns([b"k"] * len(values), values, headers, [1_700_000_000_000 + i for i in range(len(values))])
    return ForwardedCall(columns_to_table([columns]), np.array(partitions, dtype=np.int32), acks, 2500, producer)


def test_calls_arrive_with_their_records_partitions_and_producer_fields() -> None:
    sent = [_call([b"a", b"b"], [0, 3], acks=-1, producer=ProducerBatch(7, 2, 40)),
            _call([b"c"], [1], headers=[[{"key": "h", "value": b"v"}]]),
            _call([b"d", None, b"f"], [2, 2, 0])]  # type: ignore[list-item]
    got = decode_calls(encode_calls(sent))
    assert len(got) == 3
    for before, after in zip(sent, got):
        assert after.table.equals(before.table)
        assert after.partitions.tolist() == before.partitions.tolist()
        assert (after.acks, after.timeout_ms, after.producer) == (before.acks, before.timeout_ms, before.producer)


def test_a_body_that_is_not_a_forwarded_call_is_refused() -> None:
    with pytest.raises(ValueError):
        decode_calls(b"not arrow")


def test_results_and_errors_come_back_per_call() -> None:
    calls = [_call([b"a", b"b"], [0, 1]), _call([b"c"], [1]), _call([b"d"], [0])]
    results = [ProduceResult(calls[0].partitions, np.array([10, 4]), np.array([5, 6]), version=9),
               core.OutOfOrderSequence("expected sequence 3"),
               core.OffsetOutOfRange("out", 2, 8)]
    back = decode_results(encode_results(results), calls)
    assert back[0].offsets.tolist() == [10, 4] and back[0].timestamps_ms.tolist() == [5, 6]
    assert back[0].partitions.tolist() == [0, 1] and back[0].version == 9 and not back[0].duplicate
    assert isinstance(back[1], core.OutOfOrderSequence) and back[1].message == "expected sequence 3"
    assert isinstance(back[2], core.OffsetOutOfRange) and (back[2].log_start_offset, back[2].log_end_offset) == (2, 8)


def test_a_duplicate_is_answered_with_the_partitions_of_the_first_attempt() -> None:
    retry = _call([b"a", b"b"], [3, 3])  # unkeyed: the retry was partitioned anew
    first = ProduceResult(np.array([1, 1], dtype=np.int32), np.array([7, 8]), np.array([5, 5]), duplicate=True)
    back = decode_results(encode_results([first]), [retry])[0]
    assert back.partitions.tolist() == [1, 1] and back.duplicate


def test_an_error_of_a_kind_this_node_does_not_know_keeps_its_code_and_retriability() -> None:
    calls = [_call([b"a"], [0])]
    error = RemoteError("from a newer node", "SOME_NEW_ERROR", True)
    back = decode_results(encode_results([error]), calls)[0]
    assert isinstance(back, RemoteError) and (back.code, back.retriable) == ("SOME_NEW_ERROR", True)


def test_an_answer_for_another_number_of_calls_is_refused() -> None:
    calls = [_call([b"a"], [0]), _call([b"b"], [0])]
    with pytest.raises(ValueError):
        decode_results(encode_results([core.RequestTimedOut("late")]), calls)


@given(st.lists(st.tuples(st.integers(0, 7), st.integers(1, 4), st.integers(1, 3)), min_size=1, max_size=40),
       st.booleans())
def test_answers_of_any_shape_come_back_exactly(calls_shape: list[tuple[int, int, int]], stamped: bool) -> None:
    """Calls of 1 to 4 records each, the leader's offsets interleaved with other nodes' calls (gaps of 1 to 3)."""
    ends: dict[int, int] = {}
    calls, results = [], []
    for partition, rows, gap in calls_shape:
        call = _call([b"v"] * rows, [partition] * rows)
        first = ends.get(partition, 1000 * partition) + gap
        ends[partition] = first + rows
        stamps = np.full(rows, 1_800_000_000_000) if stamped else np.arange(rows) + 1_700_000_000_000
        calls.append(call)
        results.append(ProduceResult(call.partitions, np.arange(first, first + rows), stamps, version=-1))
    back = decode_results(encode_results(results), calls)
    for sent, got in zip(results, back):
        assert got.offsets.tolist() == sent.offsets.tolist()
        assert got.timestamps_ms.tolist() == sent.timestamps_ms.tolist()
        assert got.partitions.tolist() == sent.partitions.tolist()


def test_an_answer_is_a_few_bytes_a_record() -> None:
    """200 single-record calls over 8 partitions, landed one after another in one flush: the answer is far
    below the records' bytes (a forwarded call's answer was ~13 bytes a record before; 110-byte records)."""
    calls = [_call([b"x" * 100], [i % 8]) for i in range(200)]
    results = [ProduceResult(call.partitions, np.array([5000 + i // 8]), np.array([1_800_000_000_000]))
               for i, call in enumerate(calls)]
    assert len(encode_results(results)) / len(calls) < 5
