"""The commit planner: journal entries placed at their own offsets, whatever order they come in and
however much of them the table already holds; never past a gap, never over other records."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.platform.journal.objects import Entry
from lakelog.platform.journal.planner import deletable_slots, plan_commit


def split(total: int, cuts: list[int], partition: int = 0) -> list[Entry]:
    """Dense entries covering [0, total) cut at `cuts`."""
    bounds = sorted({0, total, *[c for c in cuts if 0 < c < total]})
    return [Entry("t", partition, lo, hi - lo) for lo, hi in zip(bounds, bounds[1:])]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 200), st.lists(st.integers(1, 199), max_size=10), st.data())
def test_commit_picks_up_exactly_where_the_table_ends(total: int, cuts: list[int], data: st.DataObject) -> None:
    entries = split(total, cuts)
    boundaries = [0] + [e.end for e in entries]
    table_end = data.draw(st.sampled_from(boundaries))  # a table commits whole entries
    shuffled = data.draw(st.permutations(entries))
    plan = plan_commit({0: table_end}, shuffled)
    assert not plan.blocked and not plan.conflicting
    assert {e.base for e in plan.skip} == {e.base for e in entries if e.end <= table_end}
    committed = [(e.base, e.end) for e in plan.commit]
    assert committed == sorted(committed)
    # dense from the table's end to the last acknowledged offset: nothing lost, nothing twice
    assert [o for lo, hi in committed for o in range(lo, hi)] == list(range(table_end, total))
    if plan.commit:
        assert plan.bases() == {0: table_end} and plan.ends() == {0: total}


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 100), st.lists(st.integers(1, 99), min_size=1, max_size=8), st.data())
def test_a_missing_entry_blocks_what_follows(total: int, cuts: list[int], data: st.DataObject) -> None:
    entries = split(total, cuts)
    if len(entries) < 2:
        return
    missing = data.draw(st.integers(0, len(entries) - 2))
    given_entries = entries[:missing] + entries[missing + 1:]
    plan = plan_commit({}, given_entries)
    assert [e.base for e in plan.commit] == [e.base for e in entries[:missing]]
    assert {e.base for e in plan.blocked} == {e.base for e in entries[missing + 1:]}


def test_partitions_are_planned_apart_and_overlaps_are_refused() -> None:
    entries = [Entry("t", 0, 0, 5), Entry("t", 1, 3, 2), Entry("t", 1, 0, 3), Entry("t", 2, 4, 4)]
    plan = plan_commit({0: 0, 1: 3, 2: 6}, entries)
    assert plan.commit == [Entry("t", 0, 0, 5), Entry("t", 1, 3, 2)]
    assert plan.skip == [Entry("t", 1, 0, 3)]
    assert plan.conflicting == [Entry("t", 2, 4, 4)]  # straddles the table's end: another writer's records
    assert plan.bases() == {0: 0, 1: 3}


def test_deletion_goes_in_slot_order_and_keeps_the_highest() -> None:
    assert deletable_slots({0: 0, 1: 0, 2: 1, 3: 0}, keep=3) == [0, 1]
    assert deletable_slots({0: 0, 1: 0}, keep=1) == [0]
    assert deletable_slots({0: 0, 1: 0}, keep=None) == [0, 1]
    assert deletable_slots({4: 2, 5: 0}, keep=5) == []
