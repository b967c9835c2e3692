"""The sweep's choice of slots: only records objects of a fenced generation, all of whose entries are in
their tables (or whose topic is gone), below the generation's highest slot; never a fence or tombstone."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.platform.journal.objects import FENCE, RECORDS, TOMBSTONE, Entry
from lakelog.platform.journal.sweep_plan import Slot, TableEnds, entry_done, sweepable, waiting_topics

TOPICS = ("a", "b", "gone")


def records(slot: int, *entries: Entry) -> Slot:
    return Slot(slot, RECORDS, entries)


def test_a_fenced_generation_loses_its_replayed_objects_but_keeps_its_markers_and_highest_slot() -> None:
    slots = [records(0, Entry("a", 0, 0, 3)), records(1, Entry("a", 0, 3, 2)), Slot(2, FENCE), Slot(3, FENCE)]
    assert sweepable(slots, {"a": {0: 5}}) == [0, 1]
    assert sweepable(slots, {"a": {0: 4}}) == [0]  # the second entry ends past the table: kept


def test_an_unfenced_generation_is_never_swept() -> None:
    slots = [records(0, Entry("a", 0, 0, 3)), records(1, Entry("a", 0, 3, 2)), Slot(2, TOMBSTONE)]
    assert sweepable(slots, {"a": {0: 100}}) == []


def test_an_object_with_an_entry_of_a_topic_nobody_replayed_is_kept() -> None:
    slots = [records(0, Entry("a", 0, 0, 3), Entry("b", 0, 0, 1)), records(1, Entry("a", 0, 3, 1)),
             Slot(2, FENCE)]
    ends: TableEnds = {"a": {0: 4}, "b": {0: 0}}
    assert sweepable(slots, ends) == [1]
    assert waiting_topics(slots, ends) == {"b"}
    assert sweepable(slots, {**ends, "b": {0: 1}}) == [0, 1]


def test_a_deleted_topic_counts_as_done_an_unread_one_does_not() -> None:
    slots = [records(0, Entry("gone", 0, 0, 3)), Slot(1, FENCE)]
    assert sweepable(slots, {"gone": None}) == [0]
    assert sweepable(slots, {}) == []  # its table could not be read
    assert not entry_done(Entry("a", 2, 0, 1), {"a": {0: 10}})  # a partition the table does not have


def test_the_highest_slot_stays_even_when_it_holds_records() -> None:
    slots = [Slot(0, FENCE), records(1, Entry("a", 0, 0, 1))]  # not a layout the writer makes: still kept
    assert sweepable(slots, {"a": {0: 1}}) == []


entries = st.builds(Entry, st.sampled_from(TOPICS), st.integers(0, 2), st.integers(0, 50), st.integers(1, 20))
slot_kinds = st.sampled_from((RECORDS, RECORDS, RECORDS, FENCE, TOMBSTONE, "unreadable"))
table_ends = st.fixed_dictionaries({}, optional={
    "a": st.dictionaries(st.integers(0, 2), st.integers(0, 80)),
    "b": st.dictionaries(st.integers(0, 2), st.integers(0, 80)),
    "gone": st.none() | st.dictionaries(st.integers(0, 2), st.integers(0, 80)),
})


@st.composite
def generations(draw: st.DrawFn) -> list[Slot]:
    numbers = draw(st.lists(st.integers(0, 40), unique=True, max_size=12))
    out = []
    for n in numbers:
        kind = draw(slot_kinds)
        out.append(Slot(n, kind, tuple(draw(st.lists(entries, min_size=1, max_size=4))) if kind == RECORDS else ()))
    return out


@settings(max_examples=400, deadline=None)
@given(generations(), table_ends)
def test_never_a_marker_the_highest_slot_or_an_entry_past_its_table(slots: list[Slot], ends: TableEnds) -> None:
    chosen = sweepable(slots, ends)
    by_slot = {s.slot: s for s in slots}
    assert chosen == sorted(set(chosen)) and set(chosen) <= set(by_slot)
    if chosen:
        assert any(s.kind == FENCE for s in slots)
        assert max(by_slot) not in chosen
    for n in chosen:
        assert by_slot[n].kind == RECORDS
        for e in by_slot[n].entries:
            table = ends[e.topic]  # a topic whose table was not read is never done
            assert table is None or (e.partition in table and e.end <= table[e.partition])
    # and everything else that qualifies is chosen: a fenced generation shrinks to its markers and its top
    if any(s.kind == FENCE for s in slots):
        left = [s for s in slots if s.slot not in chosen and s.kind == RECORDS and s.slot != max(by_slot)]
        assert all(not all(entry_done(e, ends) for e in s.entries) for s in left)
        assert waiting_topics(slots, ends) >= {e.topic for s in left for e in s.entries if not entry_done(e, ends)}
