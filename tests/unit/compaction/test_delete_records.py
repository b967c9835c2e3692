"""compaction.delete_records: DeleteRecords as retention does it, planned from the segment index alone.

The files wholly below the offset leave the table, the file it falls inside is rewritten from it (so the
new log start is exactly the offset), and a file holding several partitions leaves only with all its
slices: the other partitions' slices are rewritten unchanged in the same commit.
"""

from __future__ import annotations

import pytest

from lakelog.compaction.delete_records import Rewrite, plan_delete_records, resolve_target
from lakelog.platform.errors import OffsetOutOfRange
from lakelog.platform.segments.index import SegmentFile


def segment(path: str, partition: int, first: int, last: int, shared: bool = False) -> SegmentFile:
    return SegmentFile(path, partition, 100, last - first + 1, first, last, 0, 1,
                       row_groups=(partition,) if shared else None)


def test_files_below_go_and_the_file_holding_the_offset_is_cut_there() -> None:
    files = {0: [segment("a", 0, 0, 9), segment("b", 0, 10, 19), segment("c", 0, 20, 29)]}
    plan = plan_delete_records({0: 15}, files)
    assert [s.path for s in plan.removed] == ["a", "b"]
    assert plan.rewrites == (Rewrite(files[0][1], 15),)
    assert plan.rewrites[0].bounded.min_offset == 15  # the new file's statistics start at the offset


def test_an_offset_at_a_file_boundary_rewrites_nothing() -> None:
    files = {0: [segment("a", 0, 0, 9), segment("b", 0, 10, 19)]}
    plan = plan_delete_records({0: 10}, files)
    assert [s.path for s in plan.removed] == ["a"] and plan.rewrites == ()


def test_an_offset_at_or_below_the_log_start_changes_nothing() -> None:
    files = {0: [segment("a", 0, 5, 9)]}
    assert not plan_delete_records({0: 5}, files).changes
    assert not plan_delete_records({0: 0}, files).changes


def test_up_to_the_end_every_file_goes() -> None:
    files = {0: [segment("a", 0, 0, 9), segment("b", 0, 10, 19)]}
    plan = plan_delete_records({0: 20}, files)
    assert [s.path for s in plan.removed] == ["a", "b"] and plan.rewrites == ()


def test_a_shared_file_leaves_with_every_partitions_slice() -> None:
    """One flush of partitions 0, 1 and 2; records of partition 0 deleted up to 4: partition 0's slice is cut,
    the others are carried over whole, and the next flush's file is not touched."""
    files = {p: [segment("flush0", p, 0, 9, shared=True), segment("flush1", p, 10, 12, shared=True)]
             for p in range(3)}
    plan = plan_delete_records({0: 4}, files)
    assert sorted((s.path, s.partition) for s in plan.removed) == [("flush0", 0), ("flush0", 1), ("flush0", 2)]
    assert sorted((r.segment.partition, r.start) for r in plan.rewrites) == [(0, 4), (1, 0), (2, 0)]


def test_several_partitions_of_one_shared_file_in_one_request() -> None:
    files = {p: [segment("flush0", p, 0, 9, shared=True)] for p in range(2)}
    plan = plan_delete_records({0: 4, 1: 10}, files)  # partition 1: up to its end
    assert sorted((s.path, s.partition) for s in plan.removed) == [("flush0", 0), ("flush0", 1)]
    assert [(r.segment.partition, r.start) for r in plan.rewrites] == [(0, 4)]


@pytest.mark.parametrize(("offset", "start", "high", "target"), [
    (-1, 0, 10, 10),  # -1: up to the high watermark
    (4, 0, 10, 4),
    (10, 0, 10, 10),
    (2, 5, 10, 5),  # below the log start: nothing moves
    (0, 0, 0, 0),
])
def test_targets(offset: int, start: int, high: int, target: int) -> None:
    assert resolve_target(offset, start, high) == target


@pytest.mark.parametrize("offset", [11, -2, -100])
def test_out_of_range_targets_are_refused(offset: int) -> None:
    with pytest.raises(OffsetOutOfRange):
        resolve_target(offset, 0, 10)
