"""Consumer positions: where a member reads next, fair fetching across its partitions, and auto-commit.

A poll reads every assigned partition in turn, each getting a share of `max_records`, starting one
partition further each time: no partition is read to exhaustion before the next (Kafka's greedy
consumer pitfall). A partition without a position starts at the group's committed offset, or where
`auto.offset.reset` says when there is none or it is out of range.
"""

from __future__ import annotations

import logging
from typing import Protocol

from lakelog.platform.errors import LakelogError, OffsetOutOfRange, UnknownTopicOrPartition
from lakelog.platform.groups.errors import NoOffsetForPartition
from lakelog.platform.groups.membership import Group, Member
from lakelog.platform.groups.offsets import CommittedOffset, OffsetRow
from lakelog.platform.records import FetchResult, TopicPartition

logger = logging.getLogger(__name__)  # not `log`: the functions name the broker they read `log`

Plan = list[tuple[TopicPartition, int]]  # (topic-partition, position) in the order to read them


class Log(Protocol):
    """What positions need of the broker."""

    def fetch(self, topic: str, partition: int, offset: int, max_records: int = 500, max_bytes: int | None = None,
              timeout_ms: int = 0) -> FetchResult: ...

    def check_offset(self, topic: str, partition: int, offset: int) -> None: ...

    def list_offset(self, topic: str, partition: int, spec: str | int) -> int: ...


def rotated(plan: Plan, cursor: int) -> Plan:
    """The plan starting at `cursor`: each poll starts one partition further."""
    if not plan:
        return []
    at = cursor % len(plan)
    return plan[at:] + plan[:at]


def shares(count: int, max_records: int) -> int:
    """Each partition's share of a poll's records (at least one)."""
    return max(-(-max_records // count), 1) if count else 0


def initial_position(log: Log, tp: TopicPartition, committed: CommittedOffset | None, reset: str) -> int:
    if committed is not None:
        try:
            log.check_offset(tp[0], tp[1], committed.offset)
            return committed.offset
        except OffsetOutOfRange as exc:
            if reset == "none":
                raise NoOffsetForPartition(
                    f"committed offset {committed.offset} of {tp[0]}-{tp[1]} is out of range and "
                    "auto.offset.reset is none") from None
            # A line, as Kafka's consumer logs a reset: the member reads records again, or skips some.
            logger.warning("committed offset %d of %s-%d is out of range (%s): auto.offset.reset %s applies",
                           committed.offset, tp[0], tp[1], exc, reset)
    elif reset == "none":
        raise NoOffsetForPartition(f"no committed offset for {tp[0]}-{tp[1]} and auto.offset.reset is none")
    return log.list_offset(tp[0], tp[1], reset)


def initial_positions(log: Log, committed: dict[TopicPartition, CommittedOffset | None],
                      reset: str) -> dict[TopicPartition, int]:
    """`initial_position` of each partition; one whose offset cannot be judged now (its leader did not
    answer, with the journal on) gets none, and the next poll asks again."""
    found = {}
    for tp, offset in committed.items():
        try:
            found[tp] = initial_position(log, tp, offset, reset)
        except LakelogError as exc:
            if not exc.retriable:
                raise
            logger.info("position of %s-%d left for the next poll: %s", tp[0], tp[1], exc)
    return found


def fetch_fairly(log: Log, plan: Plan, max_records: int,
                 max_bytes: int | None) -> tuple[list[FetchResult], list[TopicPartition]]:
    """Read each partition of the plan up to its share; answers the results and the partitions whose
    position fell below the log start (retention passed it: `auto.offset.reset` applies)."""
    share = shares(len(plan), max_records)
    budget, bytes_left = max_records, max_bytes
    results: list[FetchResult] = []
    out_of_range: list[TopicPartition] = []
    for (topic, partition), offset in plan:
        if budget <= 0 or (bytes_left is not None and bytes_left <= 0):
            break
        try:
            result = log.fetch(topic, partition, offset, min(share, budget), bytes_left, 0)
        except OffsetOutOfRange:
            out_of_range.append((topic, partition))
            continue
        except UnknownTopicOrPartition:
            continue  # the topic was deleted: the next metadata check rebalances
        except LakelogError as exc:
            if not exc.retriable:
                raise
            logger.info("%s-%d left for the next poll: %s", topic, partition, exc)  # as Kafka's fetcher skips it
            continue
        if result.records.num_rows or result.skip_to is not None:  # a skip moves the position past markers
            results.append(result)
            budget -= result.records.num_rows
            if bytes_left is not None:
                bytes_left -= result.records.nbytes
    return results, out_of_range


POLLS_REMEMBERED = 16  # positions before each of the member's latest polls, for answers lost on the way


def current(member: Member, request: int | None) -> bool:
    """Whether a poll request is the member's latest one (`request`: its number, higher for each request the
    member sends; None: not numbered, always current), noting its number.

    A request numbered no higher than one already seen is stale: the member gave up on it, and it reached
    the coordinator only after a later one. Such a poll must answer nothing and change nothing. Its `after`
    is old: acknowledging it would roll back an answer the member did receive, and the stale poll's own
    answer, lost, would then take that answer's number, so that the member's next `after` acknowledged
    records it never got (tests/core/test_group_poll_overtaken.py)."""
    if request is None:
        return True
    if request <= member.requests:
        return False
    member.requests = request
    return True


def start(member: Member, after: int | None) -> int:
    """A poll begins: the member's acknowledgement applies (`acknowledge`); answers the member's answer
    count, which the poll gives back to `overtaken` and `advance` when it answers."""
    acknowledge(member, after)
    return member.answers


def overtaken(member: Member, started: int) -> bool:
    """Whether another poll of the member answered since this one started (the count `start` answered).
    Such a poll hands out nothing and changes nothing: which of the two answers the member received, only
    its next poll's `after` tells, and that poll's `acknowledge` rolls back the other (a rollback now
    could undo the answer the member did receive: its records would come again)."""
    return member.answers != started


def advance(member: Member, results: list[FetchResult], after: int | None = None,
            started: int | None = None) -> list[FetchResult]:
    """Move the member's positions past what it was given; drop results for partitions it lost meanwhile
    or that another poll already delivered. What each poll moved is kept, so that the member can say it
    never got an answer (`acknowledge`).

    `after` (the last answer the member got, as this poll said): when another poll of the member answered
    meanwhile (the member gave up waiting for it and asked again), that answer is lost to it; nothing is
    handed out now and the positions go back to before it, so the next poll hands its records out again.

    `started` (what `start` answered for this numbered poll): if another poll answered since, this one was
    overtaken (`overtaken`): nothing is handed out and nothing changes."""
    if after is not None and started is not None and overtaken(member, started):
        return []
    member.answers += 1
    if after is not None and member.polls != after:
        acknowledge(member, after)
        return []
    kept, before = [], {}
    for result in results:
        tp = (result.topic, result.partition)
        if tp in member.assignment and result.next_offset is not None:
            # No records: offsets without one (a transaction's markers) skipped, up to next_offset.
            first = int(result.records.column("offset")[0].as_py()) if result.records.num_rows \
                else result.next_offset - 1
            if member.positions.get(tp, first) <= first:
                before[tp] = member.positions.get(tp, first)
                member.positions[tp] = result.next_offset
                kept.append(result)
    if kept:
        member.polls += 1
        member.before_poll[member.polls] = before
        member.before_poll.pop(member.polls - POLLS_REMEMBERED, None)
    return kept


def acknowledge(member: Member, after: int | None) -> None:
    """The member says which poll answer it got last (`after`). The answers after it were lost on their way
    (a timeout, a node gone): the positions go back to before them, so that their records are handed out
    again instead of being skipped (and committed past by the member's next commit)."""
    if after is None or not 0 <= after < member.polls:
        return
    for n in range(member.polls, after, -1):
        moved = member.before_poll.pop(n, {})
        member.positions.update({tp: o for tp, o in moved.items() if tp in member.positions})
    member.polls = after


def auto_commit_rows(group: Group, member: Member) -> list[OffsetRow]:
    """enable.auto.commit: the positions reached by the previous polls that are not committed yet."""
    if not member.options.enable_auto_commit:
        return []
    due = {tp: o for tp, o in member.positions.items() if tp in member.assignment and
           (group.committed.get(tp) is None or group.committed[tp].offset != o)}
    return [OffsetRow(group.group_id, t, p, o, None, group.generation) for (t, p), o in due.items()]
