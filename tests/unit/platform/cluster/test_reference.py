"""Forwarded produce by reference, its pure part: the reference survives the trip, names only forward objects,
and the leader refuses an object that is not what the reference says."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakelog.platform.cluster.errors import ForwardedObjectMismatch
from lakelog.platform.cluster.reference import (
    ProduceReference,
    calls_in,
    forwards_path,
    new_object_key,
    reference_to,
)
from lakelog.platform.cluster.wire import ForwardedCall, encode_calls
from lakelog.platform.records import RecordColumns, columns_to_table

NODES = st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,20}", fullmatch=True)
COUNTS = st.integers(min_value=1, max_value=2**53)


def _call(values: list[bytes]) -> ForwardedCall:
    columns = RecordColumns([b"k"] * len(values), values, None, [1_700_000_000_000] * len(values))
    return ForwardedCall(columns_to_table([columns]), np.zeros(len(values), dtype=np.int32), 1, 2500)


@given(NODES, COUNTS, COUNTS, COUNTS)
def test_a_reference_survives_the_trip(node: str, size: int, rows: int, calls: int) -> None:
    sent = ProduceReference(new_object_key(node), size, rows, calls)
    assert ProduceReference.decode(sent.encode()) == sent
    assert sent.object.startswith(forwards_path(node) + "/")


@pytest.mark.parametrize("body", [
    b"not json",
    b"[]",
    b'{"object": "_journal/forwards/n1/' + b"a" * 32 + b'.arrow", "bytes": 1, "rows": 1}',  # a field missing
    b'{"object": "_journal/forwards/n1/' + b"a" * 32 + b'.arrow", "bytes": 1, "rows": 1, "calls": 1, "x": 1}',
    b'{"object": "topics/t/_delta_log/00000000000000000000.json", "bytes": 1, "rows": 1, "calls": 1}',
    b'{"object": "_journal/forwards/../' + b"a" * 32 + b'.arrow", "bytes": 1, "rows": 1, "calls": 1}',
    b'{"object": "_journal/forwards/n1/' + b"a" * 32 + b'.arrow/x", "bytes": 1, "rows": 1, "calls": 1}',
    b'{"object": "_journal/forwards/n1/' + b"a" * 32 + b'.arrow", "bytes": 0, "rows": 1, "calls": 1}',
    b'{"object": "_journal/forwards/n1/' + b"a" * 32 + b'.arrow", "bytes": 1, "rows": true, "calls": 1}',
    b'{"object": "_journal/forwards/n1/' + b"a" * 32 + b'.arrow", "bytes": 1, "rows": 1, "calls": "1"}',
])
def test_a_body_that_is_not_a_reference_to_a_forward_object_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        ProduceReference.decode(body)


def test_the_calls_of_an_object_that_matches_its_reference() -> None:
    sent = [_call([b"a", b"b"]), _call([b"c"])]
    body = encode_calls(sent)
    reference = reference_to(new_object_key("n1"), body, sent)
    assert (reference.bytes, reference.rows, reference.calls) == (len(body), 3, 2)
    got = calls_in(reference, body)
    assert [c.table.num_rows for c in got] == [2, 1]
    assert got[0].table.equals(sent[0].table)


@pytest.mark.parametrize("change", [
    {"bytes": 1},  # the size first: a truncated or replaced object
    {"rows": 4},
    {"calls": 1},
])
def test_an_object_that_is_not_what_its_reference_says_is_refused(change: dict) -> None:
    sent = [_call([b"a", b"b"]), _call([b"c"])]
    body = encode_calls(sent)
    reference = reference_to(new_object_key("n1"), body, sent)
    wrong = ProduceReference(**{**reference.__dict__, **change})
    with pytest.raises(ForwardedObjectMismatch, match=reference.object):
        calls_in(wrong, body)


def test_an_object_of_the_right_size_that_is_not_a_call_is_refused() -> None:
    reference = ProduceReference(new_object_key("n1"), 9, 1, 1)
    with pytest.raises(ForwardedObjectMismatch, match="not a forwarded produce call"):
        calls_in(reference, b"not arrow")
