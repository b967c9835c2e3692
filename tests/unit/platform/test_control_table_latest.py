"""control_table.latest_rows: the latest row per key wins (ties: the later row)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from lakelog.platform.control_table import latest_rows

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
