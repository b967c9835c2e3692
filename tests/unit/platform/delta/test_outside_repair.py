"""The plan of `lakelog topics repair` (outside_repair.py): files wholly beyond a partition's log end are
removed whole; anything else is refused with nothing planned."""

from __future__ import annotations

from lakelog.platform.segments.index import SegmentFile
from lakelog.platform.delta.outside_repair import RepairedPartition, plan_repair


def entry(path: str, partition: int, lo: int, hi: int) -> SegmentFile:
    return SegmentFile(path, partition, 10, hi - lo + 1, lo, hi, 0, 0)


def test_files_beyond_the_log_end_are_removed_whole_and_lakelogs_stay() -> None:
    files = {0: [entry("a", 0, 0, 4), entry("w1", 0, 5, 7), entry("w2", 0, 9, 9)], 1: [entry("b", 1, 0, 2)]}
    plan = plan_repair(files, {0: 5, 1: 3})
    assert not plan.refused
    assert [e.path for e in plan.removes] == ["w1", "w2"]
    assert plan.partitions == [RepairedPartition(0, 5, 4, 5, 9, ("w1", "w2"))]


def test_nothing_beyond_the_log_end_is_nothing_to_repair() -> None:
    plan = plan_repair({0: [entry("a", 0, 0, 4)], 1: []}, {0: 5, 1: 0})
    assert (plan.removes, plan.partitions, plan.refused) == ([], [], {})


def test_a_partition_never_produced_to_loses_every_outside_record() -> None:
    plan = plan_repair({3: [entry("w", 3, 0, 1)]}, {3: 0})
    assert plan.partitions == [RepairedPartition(3, 0, 2, 0, 1, ("w",))]


def test_a_file_on_both_sides_of_the_log_end_is_refused_and_nothing_removed() -> None:
    plan = plan_repair({0: [entry("a", 0, 0, 4), entry("w", 0, 3, 6)], 1: [entry("x", 1, 0, 0), entry("y", 1, 1, 1)]},
                       {0: 5, 1: 1})
    assert plan.refused == {0: "w holds offsets from 3 to 6, on both sides of the log end offset 5"}
    assert plan.removes == [] and plan.partitions == []  # partition 1's "y" is not removed either


def test_offsets_held_twice_below_the_log_end_are_refused() -> None:
    plan = plan_repair({0: [entry("a", 0, 0, 4), entry("w", 0, 2, 3)]}, {0: 5})
    assert "both hold offsets from 2 to 3" in plan.refused[0]


def test_a_shared_file_goes_only_when_all_its_records_are_beyond_their_log_ends() -> None:
    shared = {0: [entry("a", 0, 0, 4), entry("s", 0, 5, 6)], 1: [entry("s", 1, 0, 1)]}
    assert plan_repair(shared, {0: 5, 1: 0}).partitions == [RepairedPartition(0, 5, 2, 5, 6, ("s",)),
                                                             RepairedPartition(1, 0, 2, 0, 1, ("s",))]
    refused = plan_repair(shared, {0: 5, 1: 2})
    assert refused.refused == {0: "s also holds records of partition 1 below its log end offset 2"}
    assert refused.removes == []
