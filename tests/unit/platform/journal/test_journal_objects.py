"""The journal object codec: what is written reads back the same (records, offsets, producer fields, index),
markers are told from records, and bytes that are not a journal object are refused, never guessed at."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.platform.journal.errors import JournalCorrupt
from lakelog.platform.journal.objects import (
    FENCE,
    RECORDS,
    TOMBSTONE,
    Entry,
    decode,
    encode_marker,
    encode_records,
    entries_of,
    slot_name,
    slot_of,
)
from lakelog.schemas import TOPIC_SCHEMA


def topic_table(runs: list[tuple[int, int, int]], value: bytes = b"v") -> pa.Table:
    """Records of (partition, base, count) runs, TOPIC_SCHEMA, in that order."""
    rows = [(p, base + i) for p, base, count in runs for i in range(count)]
    n = len(rows)
    return pa.table({
        "partition": pa.array([p for p, _ in rows], pa.int32()),
        "offset": pa.array([o for _, o in rows], pa.int64()),
        "timestamp": pa.array([1_700_000_000_000 + o for _, o in rows], pa.timestamp("ms", tz="UTC")),
        "timestamp_type": pa.array([0] * n, pa.int8()),
        "key": pa.array([b"k%d" % o for _, o in rows], pa.binary()),
        "value": pa.array([value + b"%d" % o for _, o in rows], pa.binary()),
        "headers": pa.array([None] * n, TOPIC_SCHEMA.field("headers").type),
        "producer_id": pa.array([7] * n, pa.int64()),
        "producer_epoch": pa.array([0] * n, pa.int16()),
        "sequence": pa.array(list(range(n)), pa.int32()),
    }).cast(TOPIC_SCHEMA)


runs_strategy = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10**12), st.integers(1, 20)),
                         min_size=1, max_size=4, unique_by=lambda r: r[0]).map(lambda rs: sorted(rs))


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text("abcxyz._-", min_size=1, max_size=8), runs_strategy, min_size=1, max_size=4),
       st.integers(0, 10**9))
def test_records_round_trip(topics: dict[str, list[tuple[int, int, int]]], slot: int) -> None:
    tables = {name: topic_table(runs) for name, runs in topics.items()}
    obj = decode(encode_records("node-1", "run9", slot, tables))
    assert (obj.kind, obj.node, obj.run, obj.slot) == (RECORDS, "node-1", "run9", slot)
    assert obj.topics() == set(topics)
    for name, runs in topics.items():
        assert [(e.partition, e.base, e.count) for e in obj.entries if e.topic == name] == runs
        assert obj.topic_records(name).equals(tables[name])


def test_markers_hold_no_records() -> None:
    for kind in (TOMBSTONE, FENCE):
        obj = decode(encode_marker(kind, "n", "r", 3))
        assert (obj.kind, obj.slot, obj.entries, obj.records.num_rows) == (kind, 3, [], 0)
    with pytest.raises(ValueError):
        encode_marker(RECORDS, "n", "r", 3)


def test_offsets_must_be_dense_per_partition() -> None:
    table = topic_table([(0, 5, 2)])
    gap = table.set_column(1, "offset", pa.array([5, 7], pa.int64()))
    with pytest.raises(ValueError, match="not dense"):
        entries_of("t", gap)
    assert entries_of("t", table) == [Entry("t", 0, 5, 2)]


@pytest.mark.parametrize("data", [b"", b"garbage", b"\xff" * 64])
def test_other_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(JournalCorrupt):
        decode(data)


def test_a_newer_format_is_refused() -> None:
    data = encode_marker(TOMBSTONE, "n", "r", 0).replace(b'"version": 1', b'"version": 2')
    with pytest.raises(JournalCorrupt, match="unknown format"):
        decode(data)


def test_slot_names_sort_as_numbers() -> None:
    names = [slot_name(s) for s in (0, 9, 10, 12345678901)]
    assert names == sorted(names) and [slot_of(n) for n in names] == [0, 9, 10, 12345678901]
    assert slot_of("_tmp_abc") is None
    with pytest.raises(ValueError):
        slot_name(-1)
