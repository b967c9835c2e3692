"""The share-partition's state machine: acquisition, locks, acknowledgements, the delivery limit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.platform.share.errors import InvalidRecordState
from lakelog.platform.share.partition import Acquired, AckType, RecordState, SharePartition

LOCK_MS, LIMIT, LOCKS = 1_000, 3, 100


def acquire(state: SharePartition, member: str, offsets: list[int], now: int = 0, max_records: int = 500,
            read_to: int | None = None) -> list[Acquired]:
    end = read_to if read_to is not None else (offsets[-1] + 1 if offsets else state.next_offset)
    return state.acquire(member, offsets, end, now, LOCK_MS, max_records, LOCKS)


def test_new_records_are_acquired_once_in_runs_with_their_delivery_count():
    state = SharePartition(0, 0)
    assert acquire(state, "a", [0, 1, 2, 4]) == [Acquired(0, 2, 1), Acquired(4, 4, 1)]
    assert acquire(state, "b", [0, 1, 2, 4]) == []  # all held by a
    assert state.next_offset == 5 and state.held() == 4


def test_accepted_records_move_the_start_offset_and_leave_the_window():
    state = SharePartition(0, 0)
    acquire(state, "a", [0, 1, 2, 3])
    state.acknowledge("a", 1, 2, [AckType.ACCEPT], LIMIT)
    assert state.start_offset == 0  # 0 still held
    state.acknowledge("a", 0, 0, [AckType.ACCEPT], LIMIT)
    assert state.start_offset == 3 and [o for o, _ in state.in_flight()] == [3]


def test_a_released_record_comes_back_with_a_higher_delivery_count():
    state = SharePartition(0, 0)
    acquire(state, "a", [0, 1])
    state.acknowledge("a", 0, 1, [AckType.RELEASE, AckType.ACCEPT], LIMIT)
    assert state.read_from() == 0
    assert acquire(state, "b", [0, 1], read_to=2) == [Acquired(0, 0, 2)]


def test_a_rejected_record_is_archived_and_never_delivered_again():
    state = SharePartition(0, 0)
    acquire(state, "a", [0, 1])
    state.acknowledge("a", 0, 0, [AckType.REJECT], LIMIT)
    assert [(a.offset, a.reason) for a in state.take_archived()] == [(0, "rejected")]
    assert acquire(state, "b", [0, 1], read_to=2) == []
    assert state.read_from() == 2


def test_an_expired_lock_makes_the_record_available_and_archives_it_at_the_limit():
    state = SharePartition(0, 0)
    for delivery in range(1, LIMIT + 1):
        assert acquire(state, "a", [0], now=delivery * 10_000, read_to=1) == [Acquired(0, 0, delivery)]
        assert state.expire(delivery * 10_000 + LOCK_MS - 1, LIMIT) == 0  # not yet
        assert state.expire(delivery * 10_000 + LOCK_MS, LIMIT) == 1
    assert [(a.offset, a.delivery_count, a.reason) for a in state.take_archived()] == [(0, LIMIT, "delivery limit")]
    assert state.start_offset == 1


def test_an_acknowledgement_of_a_record_held_by_another_member_changes_nothing():
    state = SharePartition(0, 0)
    acquire(state, "a", [0, 1])
    with pytest.raises(InvalidRecordState):
        state.acknowledge("b", 0, 1, [AckType.ACCEPT], LIMIT)
    with pytest.raises(InvalidRecordState):  # the batch's first offset is a's, the second nobody's
        state.acknowledge("a", 1, 2, [AckType.ACCEPT], LIMIT)
    assert all(r.state is RecordState.ACQUIRED and r.owner == "a" for _, r in state.in_flight())


def test_a_member_that_leaves_releases_what_it_held():
    state = SharePartition(0, 0)
    acquire(state, "a", [0, 1])
    acquire(state, "b", [2], read_to=3)
    assert state.release_member("a", LIMIT) == 2
    assert acquire(state, "b", [0, 1, 2], read_to=3) == [Acquired(0, 1, 2)]


def test_gaps_in_the_log_are_passed_and_acknowledged_as_gaps():
    state = SharePartition(0, 0)
    assert acquire(state, "a", [1, 3], read_to=5) == [Acquired(1, 1, 1), Acquired(3, 3, 1)]
    state.acknowledge("a", 0, 4, [AckType.GAP, AckType.ACCEPT, AckType.GAP, AckType.ACCEPT, AckType.GAP], LIMIT)
    assert state.start_offset == 5 and state.in_flight() == []


def test_max_records_and_the_lock_limit_bound_an_acquisition():
    state = SharePartition(0, 0)
    assert acquire(state, "a", list(range(10)), max_records=3) == [Acquired(0, 2, 1)]
    assert state.next_offset == 3  # the rest stays new
    assert sum(a.last_offset - a.first_offset + 1 for a in
               state.acquire("b", list(range(3, 500)), 500, 0, LOCK_MS, 500, LOCKS)) == LOCKS - 3


def test_a_saved_state_comes_back_with_its_delivery_counts_and_its_locks_released():
    state = SharePartition(0, 0)
    acquire(state, "a", [0, 1, 2, 4, 5], read_to=6)
    state.acknowledge("a", 1, 1, [AckType.ACCEPT], LIMIT)
    restored = SharePartition.restored(state.start_offset, state.next_offset, state.runs())
    assert [(o, r.state, r.delivery_count) for o, r in restored.in_flight()] == [
        (0, RecordState.AVAILABLE, 1), (1, RecordState.ACKNOWLEDGED, 1), (2, RecordState.AVAILABLE, 1),
        (4, RecordState.AVAILABLE, 1), (5, RecordState.AVAILABLE, 1)]
    assert acquire(restored, "b", [0, 1, 2, 4, 5], read_to=6) == [Acquired(0, 0, 2), Acquired(2, 2, 2),
                                                                 Acquired(4, 5, 2)]


def test_the_log_start_moving_past_the_window_drops_what_went():
    state = SharePartition(0, 0)
    acquire(state, "a", [0, 1, 2])
    state.move_start(2)
    assert state.start_offset == 2 and [o for o, _ in state.in_flight()] == [2]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from(["fetch", "accept", "release", "reject", "expire"])),
                max_size=40))
def test_every_record_is_accepted_or_archived_at_most_once_and_the_window_stays_consistent(steps):
    state, held = SharePartition(0, 0), {"a": [], "b": []}
    finished: list[int] = []
    now = 0
    for member, step in steps:
        now += 100
        if step == "fetch":
            for run in acquire(state, member, list(range(state.read_from(), state.read_from() + 4)), now=now):
                held[member].extend(range(run.first_offset, run.last_offset + 1))
        elif step == "expire":
            state.expire(now + 10 * LOCK_MS, LIMIT)
            held = {"a": [], "b": []}
        elif held[member]:
            offset = held[member].pop(0)
            kind = {"accept": AckType.ACCEPT, "release": AckType.RELEASE, "reject": AckType.REJECT}[step]
            state.acknowledge(member, offset, offset, [kind], LIMIT)
            if kind is AckType.ACCEPT:
                finished.append(offset)
        finished.extend(a.offset for a in state.take_archived())
        assert len(finished) == len(set(finished))
        assert all(state.start_offset <= o < state.next_offset for o, _ in state.in_flight())
        assert all(r.delivery_count <= LIMIT for _, r in state.in_flight())
    assert all(o in finished for o in range(state.start_offset))
