"""control_table.latest_rows: the latest row per key wins (ties: the later row); read_control_table reads
what a delete left."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake
from hypothesis import given
from hypothesis import strategies as st

from lakelog.platform.delta.control_table import latest_rows, open_control_table, read_control_table
from lakelog.platform.storage import Storage

rows = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 3), st.integers(0, 5)), max_size=30)


@given(rows)
def test_the_row_with_the_highest_order_wins(data: list[tuple[str, int, int]]) -> None:
    table = pa.table({"key": pa.array([k for k, _, _ in data], pa.string()),
                      "part": pa.array([p for _, p, _ in data], pa.int64()),
                      "version": pa.array([v for _, _, v in data], pa.int64()),
                      "seq": pa.array(list(range(len(data))), pa.int64())})
    expected: dict[tuple[str, int], tuple[int, int]] = {}
    for seq, (key, part, version) in enumerate(data):
        best = expected.get((key, part))
        if best is None or (version, seq) >= best:
            expected[(key, part)] = (version, seq)
    got = latest_rows(table, ["key", "part"], ["version"]).to_pylist()
    assert len(got) == len(expected)
    assert {(r["key"], r["part"]): (r["version"], r["seq"]) for r in got} == expected


def test_an_empty_table_stays_empty() -> None:
    empty = pa.table({"key": pa.array([], pa.string()), "version": pa.array([], pa.int64())})
    assert latest_rows(empty, ["key"], ["version"]).num_rows == 0


def test_rows_left_by_a_delete_read_as_plain_strings(tmp_path: Path) -> None:
    """delta-rs rewrites a file a delete touched with string_view columns: read back as plain strings, beside
    the other files' rows, the latest row per key is still found."""
    storage = Storage.open(str(tmp_path))
    schema = pa.schema([pa.field("key", pa.string(), nullable=False), pa.field("version", pa.int64(), nullable=False)])
    table = open_control_table(storage, "control", schema)
    write_deltalake(table, pa.table({"key": ["a", "b", "c"], "version": [1, 1, 1]}, schema=schema), mode="append")
    write_deltalake(table, pa.table({"key": ["b"], "version": [2]}, schema=schema), mode="append")
    table.delete("key = 'a'")
    table.update_incremental()
    rows = read_control_table(storage, table)
    assert rows.schema.field("key").type == pa.string()
    assert sorted(latest_rows(rows, ["key"], ["version"]).to_pylist(), key=lambda r: r["key"]) == [
        {"key": "b", "version": 2}, {"key": "c", "version": 1}]
