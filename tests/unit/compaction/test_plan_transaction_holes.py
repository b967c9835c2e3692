"""compaction.plan never rewrites across a hole in a partition's offsets: an open transaction's reserved
offsets, which its records fill when it commits (platform/log/reservations.py). A roll merging the files on
both sides would cover those offsets, and the transaction's file would then overlap it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.compaction.plan import closed_segments, plan_roll
from lakelog.platform.segments.index import SegmentFile

NOW = 10_000_000


def file(path: str, first: int, records: int, size: int = 100) -> SegmentFile:
    return SegmentFile(path, 0, size, records, first, first + records - 1, NOW - 1, NOW, modification_time_ms=NOW)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 3)), min_size=1, max_size=12),
       st.integers(150, 1000))
def test_no_roll_run_and_no_closed_prefix_spans_a_hole(specs: list[tuple[int, int]], segment_bytes: int) -> None:
    files, offset = [], 0
    for i, (records, hole) in enumerate(specs):
        offset += hole  # a hole before this file: reserved offsets of an open transaction
        files.append(file(f"f{i}.parquet", offset, records))
        offset += records
    for group in plan_roll(0, files, segment_bytes, segment_ms=1, now_ms=NOW + 10):
        for before, after in zip(group.inputs, group.inputs[1:]):
            assert after.min_offset == before.max_offset + 1, f"{group} spans a hole"
    closed = closed_segments(files)
    for before, after in zip(closed, closed[1:]):
        assert after.min_offset == before.max_offset + 1
    if closed:  # nothing past the first hole is closed (retention and compaction stop there)
        first_hole = next((f.min_offset for b, f in zip(files, files[1:]) if f.min_offset > b.max_offset + 1), None)
        assert first_hole is None or closed[-1].max_offset < first_hole


def test_a_run_of_small_files_on_both_sides_of_a_hole_is_rolled_in_two() -> None:
    files = [file("a", 0, 2), file("b", 2, 2), file("c", 7, 2), file("d", 9, 2)]  # 4-6 reserved
    groups = plan_roll(0, files, 10_000, segment_ms=1, now_ms=NOW + 10)
    assert [[f.path for f in g.inputs] for g in groups] == [["a", "b"], ["c", "d"]]
