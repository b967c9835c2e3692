"""Reads relayed to a topic's leader (journal on): the fetch's ask and answer survive the trip unchanged,
the wait is split so the non-leader never waits past its caller, a leader's end never moves an offset
back, and a leader that cannot be reached is no error (the table answers) and is not asked again at once."""

from __future__ import annotations

import socket

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakelog.platform.cluster.forwarding import NodeClient
from lakelog.platform.cluster.membership import Node
from lakelog.platform.cluster.relay import MIN_ANSWER_MS, LeaderReads, at_least, split_wait
from lakelog.platform.cluster.wire import FetchAsk, decode_fetched, encode_fetched
from lakelog.platform.records import FetchResult, RecordColumns, columns_to_table


def _records(values: list[bytes | None], first_offset: int, partition: int) -> pa.Table:
    headers = [[{"key": "h", "value": b"v"}] if i % 2 else [] for i in range(len(values))]
    columns = RecordColumns([b"k"] * len(values), values, headers, [1_700_000_000_000 + i for i in range(len(values))])
    table = columns_to_table([columns])
    table = table.set_column(table.schema.get_field_index("offset"), "offset",
                             pa.array(range(first_offset, first_offset + len(values)), pa.int64()))
    return table.add_column(0, "partition", pa.array([partition] * len(values), pa.int32()))


@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=20), st.integers(0, 2**40),
       st.integers(0, 1000))
def test_a_fetch_answer_arrives_as_the_leader_served_it(values: list[bytes | None], first: int, partition: int) -> None:
    served = FetchResult("t", partition, _records(values, first, partition), first, first + len(values) + 3,
                         first + len(values))
    got = decode_fetched("t", partition, encode_fetched(served))
    assert got.records.equals(served.records)  # offsets, timestamps, keys, values, headers
    assert got.records.schema == served.records.schema
    assert (got.topic, got.partition, got.log_start_offset, got.high_watermark, got.last_stable_offset) == \
        (served.topic, served.partition, served.log_start_offset, served.high_watermark, served.last_stable_offset)


def test_an_answer_that_is_not_a_fetch_answer_is_refused() -> None:
    with pytest.raises(ValueError):
        decode_fetched("t", 0, b"not arrow")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, pa.schema([("x", pa.int8())])) as writer:
        writer.write_table(pa.table({"x": pa.array([1], pa.int8())}))
    with pytest.raises(ValueError, match="not a relayed fetch's answer"):
        decode_fetched("t", 0, sink.getvalue().to_pybytes())  # Arrow, without the offsets


@given(st.integers(0, 1000), st.integers(0, 2**40), st.integers(1, 10_000), st.one_of(st.none(), st.integers(1, 2**62)),
       st.integers(0, 300_000), st.integers(1, 2**31))
def test_a_fetch_ask_arrives_unchanged(partition: int, offset: int, records: int, max_bytes: int | None,
                                       timeout_ms: int, min_bytes: int) -> None:
    ask = FetchAsk(partition, offset, records, max_bytes, timeout_ms, min_bytes)
    assert FetchAsk.decode(ask.encode()) == ask


@pytest.mark.parametrize("body", [b"nope", b"[]", b'{"partition": 0}', b'{"partition": 0, "offset": "1", '
                                  b'"max_records": 1, "max_bytes": null, "timeout_ms": 0}',
                                  b'{"partition": true, "offset": 1, "max_records": 1, "max_bytes": null, '
                                  b'"timeout_ms": 0, "extra": 1}'])
def test_a_body_that_is_not_a_fetch_ask_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError, match="relayed fetch"):
        FetchAsk.decode(body)


@given(st.integers(-5, 600_000))
def test_the_leader_waits_less_than_the_caller_and_the_answer_no_longer(timeout_ms: int) -> None:
    leader_ms, answer_s = split_wait(timeout_ms)
    assert 0 <= leader_ms <= max(timeout_ms, 0)
    assert answer_s * 1000 == pytest.approx(max(timeout_ms, MIN_ANSWER_MS))  # the caller's wait, or a round trip's
    assert answer_s * 1000 - leader_ms >= min(max(timeout_ms, 0) // 2, 1000) - 1e-6  # time left for the answer


@given(st.one_of(st.none(), st.lists(st.integers(0, 10**6), max_size=5)), st.integers(-1, 6), st.integers(0, 10**6))
def test_the_leaders_end_counts_only_when_known_and_further(ends: list[int] | None, partition: int, end: int) -> None:
    got = at_least(ends, partition, end)
    assert got >= end
    if ends is not None and 0 <= partition < len(ends):
        assert got == max(end, ends[partition])
    else:
        assert got == end


def test_an_unreachable_leader_is_no_error_and_is_not_asked_again_at_once() -> None:
    with socket.socket() as s:  # a port nothing listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = NodeClient(None)
    try:
        reads = LeaderReads(client)
        gone = Node("gone", f"http://127.0.0.1:{port}")
        assert reads.fetch(gone, "t", 0, 5, 10, None, 0, 1) is None
        with socket.socket() as listener:  # something listens there now: a connection would show
            listener.bind(("127.0.0.1", port))
            listener.listen()
            listener.setblocking(False)
            assert reads.fetch(gone, "t", 0, 5, 10, None, 5000, 1) is None
            assert reads.log_ends(gone, "t") is None
            with pytest.raises(BlockingIOError):
                listener.accept()  # skipped: no connection was even tried
    finally:
        client.close()
