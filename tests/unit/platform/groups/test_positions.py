"""groups.positions: fair fetching across partitions, positions, auto-commit (over a fake log)."""

from __future__ import annotations

import logging

import pyarrow as pa

from lakelog.platform.cluster.errors import NodeUnavailable
from lakelog.platform.errors import InvalidRequest, OffsetOutOfRange
from lakelog.platform.groups.membership import Group, JoinOptions, Member
from lakelog.platform.groups.offsets import CommittedOffset
from lakelog.platform.groups.positions import (
    acknowledge, advance, auto_commit_rows, fetch_fairly, initial_positions, rotated,
)
from lakelog.platform.records import FetchResult
from lakelog.schemas import TOPIC_SCHEMA


class FakeLog:
    """Partition p holds offsets 0..ends[p]-1; offsets below `starts` are gone; a partition in `silent` has a
    leader that does not answer (journal on: NOT_LEADER_OR_FOLLOWER)."""

    def __init__(self, ends: dict[int, int], starts: dict[int, int] | None = None,
                 silent: frozenset[int] = frozenset()) -> None:
        self.ends, self.starts, self.silent = ends, starts or {}, silent

    def fetch(self, topic, partition, offset, max_records=500, max_bytes=None, timeout_ms=0) -> FetchResult:
        if partition in self.silent:
            raise NodeUnavailable("its leader did not answer; retry")
        if offset < self.starts.get(partition, 0):
            raise OffsetOutOfRange("gone", self.starts[partition], self.ends[partition])
        offsets = list(range(offset, min(offset + max_records, self.ends[partition])))
        table = TOPIC_SCHEMA.empty_table() if not offsets else pa.Table.from_pylist(
            [{"partition": partition, "offset": o, "timestamp": 0, "timestamp_type": 0, "key": None,
              "value": b"v", "headers": None} for o in offsets], schema=TOPIC_SCHEMA)
        return FetchResult(topic, partition, table, 0, self.ends[partition])

    def check_offset(self, topic, partition, offset) -> None:
        start, end = self.starts.get(partition, 0), self.ends[partition]
        if not start <= offset <= end:
            raise OffsetOutOfRange(f"offset {offset} out of range [{start}, {end}]", start, end)

    def list_offset(self, topic, partition, spec) -> int:
        return self.starts.get(partition, 0) if spec == "earliest" else self.ends[partition]


def test_each_partition_gets_a_share_none_is_read_to_exhaustion() -> None:
    plan = [(("t", 0), 0), (("t", 1), 0), (("t", 2), 0)]
    results, gone = fetch_fairly(FakeLog({0: 1000, 1: 1000, 2: 1000}), plan, max_records=9, max_bytes=None)
    assert [(r.partition, r.records.num_rows) for r in results] == [(0, 3), (1, 3), (2, 3)] and gone == []


def test_an_idle_partition_leaves_its_share_to_the_next() -> None:
    plan = [(("t", 0), 0), (("t", 1), 0)]
    results, _ = fetch_fairly(FakeLog({0: 0, 1: 100}), plan, max_records=10, max_bytes=None)
    assert [(r.partition, r.records.num_rows) for r in results] == [(1, 5)]


def test_positions_below_the_log_start_are_reported() -> None:
    results, gone = fetch_fairly(FakeLog({0: 10}, {0: 5}), [(("t", 0), 2)], 10, None)
    assert results == [] and gone == [("t", 0)]


def test_rotation_starts_one_further_each_poll() -> None:
    plan = [(("t", 0), 0), (("t", 1), 0), (("t", 2), 0)]
    assert [tp[1] for tp, _ in rotated(plan, 1)] == [1, 2, 0] and rotated([], 3) == []


def test_advance_moves_positions_and_drops_lost_partitions() -> None:
    member = Member("m", JoinOptions(topics=("t",)), None, 0.0, 0.0, assignment={("t", 0)})
    log = FakeLog({0: 10, 1: 10})
    kept = advance(member, [log.fetch("t", 0, 0, 4), log.fetch("t", 1, 0, 4)])
    assert [r.partition for r in kept] == [0] and member.positions == {("t", 0): 4}
    assert advance(member, [log.fetch("t", 0, 0, 4)]) == []  # already delivered


def test_a_skip_past_offsets_without_records_moves_the_position() -> None:
    """A fetch that found only a transaction's markers answers no records and where to continue: the poll
    keeps it, and the position moves there (else the member would wait at the marker, its lag 1)."""
    member = Member("m", JoinOptions(topics=("t",)), None, 0.0, 0.0, assignment={("t", 0)},
                    positions={("t", 0): 2})
    skipped = FetchResult("t", 0, TOPIC_SCHEMA.empty_table(), 0, 3, 3, skip_to=3)

    class Markers(FakeLog):
        def fetch(self, topic, partition, offset, max_records=500, max_bytes=None, timeout_ms=0) -> FetchResult:
            return skipped

    results, _ = fetch_fairly(Markers({0: 3}), [(("t", 0), 2)], 10, None)
    assert results == [skipped]
    assert advance(member, results) == [skipped] and member.positions == {("t", 0): 3}
    assert advance(member, results) == [] and member.positions == {("t", 0): 3}  # already past: nothing moves


def test_auto_commit_commits_what_moved() -> None:
    member = Member("m", JoinOptions(topics=("t",)), None, 0.0, 0.0, assignment={("t", 0), ("t", 1)},
                    positions={("t", 0): 7, ("t", 1): 3})
    group = Group("g", generation=4, committed={("t", 1): CommittedOffset(3, None, 0)})
    rows = auto_commit_rows(group, member)
    assert [(r.topic, r.partition, r.offset, r.generation) for r in rows] == [("t", 0, 7, 4)]
    off = Member("m", JoinOptions(topics=("t",), enable_auto_commit=False), None, 0.0, 0.0,
                 assignment={("t", 0)}, positions={("t", 0): 7})
    assert auto_commit_rows(group, off) == []


def _polled(member: Member, log: FakeLog, plan_from: dict[int, int]) -> list[int]:
    results, _ = fetch_fairly(log, [(("t", p), o) for p, o in plan_from.items()], max_records=4, max_bytes=None)
    return [r.partition for r in advance(member, results)]


def test_a_poll_answer_that_was_lost_is_handed_out_again() -> None:
    member = Member("m", JoinOptions(topics=["t"]), None, 0.0, 0.0, assignment={("t", 0), ("t", 1)})
    log = FakeLog({0: 100, 1: 100})
    _polled(member, log, {0: 0, 1: 0})
    assert member.polls == 1 and member.positions == {("t", 0): 2, ("t", 1): 2}
    acknowledge(member, 1)  # received: nothing moves
    _polled(member, log, dict((tp[1], o) for tp, o in member.positions.items()))
    assert member.polls == 2 and member.positions == {("t", 0): 4, ("t", 1): 4}
    acknowledge(member, 1)  # poll 2 never arrived: its records come again
    assert member.polls == 1 and member.positions == {("t", 0): 2, ("t", 1): 2}


def test_without_an_acknowledgement_every_answer_counts_as_received() -> None:
    member = Member("m", JoinOptions(topics=["t"]), None, 0.0, 0.0, assignment={("t", 0)})
    _polled(member, FakeLog({0: 100}), {0: 0})
    acknowledge(member, None)
    acknowledge(member, 7)  # a poll the member cannot have had: ignored
    assert member.positions == {("t", 0): 4} and member.polls == 1


def _positions_of(member: Member) -> dict[int, int]:
    return {tp[1]: o for tp, o in member.positions.items()}


def test_several_lost_answers_all_come_again() -> None:
    member = Member("m", JoinOptions(topics=["t"]), None, 0.0, 0.0, assignment={("t", 0), ("t", 1)})
    log = FakeLog({0: 100, 1: 100})
    _polled(member, log, {0: 0, 1: 0})
    for _ in range(3):
        _polled(member, log, _positions_of(member))
    assert member.polls == 4 and _positions_of(member) == {0: 8, 1: 8}
    acknowledge(member, 1)  # the member got the first answer only
    assert member.polls == 1 and _positions_of(member) == {0: 2, 1: 2}


def test_a_poll_overtaken_by_another_of_the_member_hands_nothing_out_and_rewinds() -> None:
    """The member gave up waiting for a poll and asked again (after=0); the first one answered meanwhile,
    into a closed connection: the second must not hand out the records after it."""
    member = Member("m", JoinOptions(topics=["t"]), None, 0.0, 0.0, assignment={("t", 0)})
    log = FakeLog({0: 100})
    _polled(member, log, {0: 0})  # the abandoned poll answered: positions moved to 4
    results, _ = fetch_fairly(log, [(("t", 0), 4)], max_records=4, max_bytes=None)
    assert advance(member, results, after=0) == []
    assert member.polls == 0 and _positions_of(member) == {0: 0}


def test_a_poll_overtaken_by_a_newer_one_that_answered_changes_nothing() -> None:
    """The member gave up on poll X (after=0) and asked again: Y (after=0 too) answered first, and the
    member got it. X, finishing afterwards, must neither hand out nor roll back: were Y's positions undone,
    its records would come again (duplicates, and a commit moving the committed offset backwards)."""
    from lakelog.platform.groups import positions

    member = Member("m", JoinOptions(topics=["t"]), None, 0.0, 0.0, assignment={("t", 0)},
                    positions={("t", 0): 0})
    log = FakeLog({0: 100})
    x = positions.start(member, 0)  # the abandoned poll
    y = positions.start(member, 0)  # the member's new poll
    assert [r.records.num_rows for r in positions.advance(member, [log.fetch("t", 0, 0, 4)], 0, y)] == [4]
    assert member.polls == 1 and _positions_of(member) == {0: 4}  # Y answered: number 1, offsets 0-3
    assert positions.overtaken(member, x)
    assert positions.advance(member, [log.fetch("t", 0, 0, 4)], 0, x) == []  # X read before Y moved on
    assert positions.advance(member, [], 0, x) == []  # or X found nothing
    assert member.polls == 1 and _positions_of(member) == {0: 4}, "the overtaken poll rolled back Y"
    positions.start(member, 1)  # the member's next poll acknowledges Y
    assert member.polls == 1 and _positions_of(member) == {0: 4}


def test_when_the_abandoned_poll_answered_first_the_next_poll_rolls_it_back() -> None:
    """The other order: X (abandoned) answered first, into a closed connection; Y, overtaken, answers the
    member nothing with X's predecessor's number, and the member's next poll (after=0) rolls X back."""
    from lakelog.platform.groups import positions

    member = Member("m", JoinOptions(topics=["t"]), None, 0.0, 0.0, assignment={("t", 0)},
                    positions={("t", 0): 0})
    log = FakeLog({0: 100})
    x, y = positions.start(member, 0), positions.start(member, 0)
    assert len(positions.advance(member, [log.fetch("t", 0, 0, 4)], 0, x)) == 1
    assert positions.overtaken(member, y)
    assert positions.advance(member, [log.fetch("t", 0, 4, 4)], 0, y) == []
    assert member.polls == 1 and _positions_of(member) == {0: 4}  # unchanged until the member says
    positions.start(member, 0)  # Y's answer carried number 0: X's answer was lost
    assert member.polls == 0 and _positions_of(member) == {0: 0}


def test_a_request_older_than_one_seen_is_stale_and_changes_nothing() -> None:
    """Request numbers only grow: a poll request that reaches the coordinator after a later one of its member
    (the member gave up on it) is not current, and its old `after` is never applied."""
    from lakelog.platform.groups import positions

    member = Member("m", JoinOptions(topics=["t"]), None, 0.0, 0.0, assignment={("t", 0)},
                    positions={("t", 0): 0})
    log = FakeLog({0: 100})
    assert positions.current(member, 2)  # R, sent after S
    positions.advance(member, [log.fetch("t", 0, 0, 4)], 0, positions.start(member, 0))
    assert member.polls == 1 and _positions_of(member) == {0: 4}  # the member got R's answer
    assert not positions.current(member, 1) and not positions.current(member, 2)  # S late, or R again
    assert member.polls == 1 and _positions_of(member) == {0: 4}
    assert positions.current(member, 3) and positions.current(member, None)  # unnumbered: always current


def test_a_partition_whose_leader_is_silent_is_left_for_the_next_poll() -> None:
    """Retriable: the other partitions are read, and the silent one is neither out of range (that would reset
    the member's position) nor a failed poll."""
    plan = [(("t", 0), 0), (("t", 1), 0)]
    results, gone = fetch_fairly(FakeLog({0: 10, 1: 10}, silent=frozenset({0})), plan, max_records=4, max_bytes=None)
    assert [(r.partition, r.records.num_rows) for r in results] == [(1, 2)] and gone == []


def test_a_fetch_error_that_is_not_retriable_fails_the_poll() -> None:
    class Refusing(FakeLog):
        def fetch(self, *args, **kwargs) -> FetchResult:  # type: ignore[no-untyped-def]
            raise InvalidRequest("refused")

    try:
        fetch_fairly(Refusing({0: 10}), [(("t", 0), 0)], max_records=4, max_bytes=None)
        raise AssertionError("a refusal was swallowed")
    except InvalidRequest:
        pass


def test_a_committed_offset_out_of_range_is_reset_with_a_log_line_naming_it(caplog) -> None:
    # The member re-reads from the log start (or skips records): an operator must be able to see why.
    committed = {("t", 0): CommittedOffset(963, None, 0), ("t", 1): CommittedOffset(5, None, 0)}
    with caplog.at_level(logging.WARNING, logger="lakelog.platform.groups.positions"):
        found = initial_positions(FakeLog({0: 900, 1: 10}, starts={0: 100}), committed, "earliest")
    assert found == {("t", 0): 100, ("t", 1): 5}
    [line] = [r.getMessage() for r in caplog.records]
    assert "963 of t-0 is out of range" in line and "[100, 900]" in line and "earliest" in line
