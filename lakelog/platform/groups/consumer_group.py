"""KIP-848's consumer group protocol (`group.protocol=consumer`) on the membership state machine.

Pure, as `membership.py`: every call takes the time and a snapshot of partition counts and changes only the
`Membership` it is given (the coordinator calls in under its lock). A member heartbeats with its epoch: 0
joins, -1 leaves, -2 is a static member's temporary leave (its partitions wait for its next instance, or its
session timeout); any other epoch is a heartbeat reporting, when they changed, the partitions it owns. The
server assigns (Kafka's `uniform` and `range` server assignors, lakelog's cooperative-sticky and range), and
revocation is always incremental: a partition reaches its new owner only once its old owner reported that
it no longer owns it, within the member's rebalance timeout (RebalanceTimeoutMs, counted from the answer that
told it), after which the member is fenced: removed, so its partitions move. A member's epoch is the group
generation its current assignment dates from; the assignment is answered only when it changed (or the
member's epoch lags, as after a lost answer).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Callable

from lakelog.platform.groups.errors import (
    FencedMemberEpoch,
    GroupIdNotFound,
    InconsistentGroupProtocol,
    StaleMemberEpoch,
    UnknownMemberId,
    UnsupportedAssignor,
)
from lakelog.platform.groups.membership import (
    CONSUMER,
    Group,
    JoinOptions,
    Member,
    Membership,
    PartitionCounts,
    check_group_id,
    compile_topic_pattern,
)
from lakelog.platform.records import TopicPartition

log = logging.getLogger(__name__)

JOIN, LEAVE, STATIC_LEAVE = 0, -1, -2
SERVER_ASSIGNORS = {"uniform": "cooperative-sticky", "range": "range"}  # Kafka's names -> lakelog's assignors
DEFAULT_ASSIGNOR = "uniform"
NO_POLL_RULE_MS = 2**31 - 1  # max.poll.interval.ms is the client's own in KIP-848


@dataclass(frozen=True)
class ConsumerHeartbeat:
    """One ConsumerGroupHeartbeat, topics by name. None: unchanged since the member's last heartbeat."""

    member_id: str
    member_epoch: int
    session_timeout_ms: int
    instance_id: str | None = None
    topics: tuple[str, ...] | None = None
    regex: str | None = None
    assignor: str | None = None
    owned: frozenset[TopicPartition] | None = None
    rebalance_timeout_ms: int | None = None  # how long the member may take to revoke (None, -1: unchanged)
    # Which topics the member may describe (access control): a regex subscription only gets those.
    can_read: Callable[[str], bool] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ConsumerAnswer:
    member_id: str
    epoch: int
    assignment: list[TopicPartition] | None  # None: unchanged since the last answer


def server_assignor(name: str | None) -> str:
    """lakelog's assignor for a ServerAssignor name (null: the default, `uniform`)."""
    assignor = SERVER_ASSIGNORS.get(name or DEFAULT_ASSIGNOR)
    if assignor is None:
        raise UnsupportedAssignor(f"server assignor {name!r} is not one of {', '.join(SERVER_ASSIGNORS)}")
    return assignor


def kafka_assignor(assignor: str | None) -> str:
    """The ServerAssignor name of a consumer group's assignor (as ConsumerGroupDescribe answers it)."""
    return next((k for k, v in SERVER_ASSIGNORS.items() if v == assignor), DEFAULT_ASSIGNOR)


def heartbeat(membership: Membership, group_id: str, request: ConsumerHeartbeat, now: float,
              counts: PartitionCounts) -> ConsumerAnswer:
    check_group_id(group_id)
    group = membership.groups.get(group_id)
    if group is not None:
        _check_kind(group)
    if request.member_epoch == JOIN:
        return _join(membership, group_id, request, now, counts)
    group, member = membership.member(group_id, request.member_id)
    if request.member_epoch in (LEAVE, STATIC_LEAVE):
        if request.member_epoch == LEAVE or not member.options.group_instance_id:
            membership.leave(group_id, member.member_id, counts)
        return ConsumerAnswer(member.member_id, request.member_epoch, None)
    if request.member_epoch > member.epoch:
        raise FencedMemberEpoch(f"member {member.member_id!r} sent epoch {request.member_epoch}; its epoch is "
                                f"{member.epoch}: join again")
    member.last_heartbeat = member.last_poll = now
    if member.options.can_read is None and request.can_read is not None:  # restored from the table
        member.options = dataclasses.replace(member.options, can_read=request.can_read)
    _resubscribe(membership, group, member, request, counts)
    if request.rebalance_timeout_ms is not None and request.rebalance_timeout_ms > 0:
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
    if request.owned is not None:
        released = member.revoking - request.owned
        if released:
            membership.release(group, member, released)
    answer = _answer(group, member, resend=request.member_epoch != member.epoch)
    _time_revocation(member, now)
    return answer


def check_commit(group: Group, member_id: str, epoch: int) -> Member:
    """An offset commit of a consumer-protocol member (OffsetCommit v9+: its member epoch)."""
    member = group.members.get(member_id)
    if member is None:
        raise UnknownMemberId(f"unknown member {member_id!r} of group {group.group_id!r}")
    if epoch > member.epoch:
        raise FencedMemberEpoch(f"epoch {epoch} is ahead of member {member_id!r}'s epoch {member.epoch}")
    if epoch < member.epoch:
        raise StaleMemberEpoch(f"epoch {epoch} is older than member {member_id!r}'s epoch {member.epoch}; "
                               "commit again after the next heartbeat")
    return member


def _check_kind(group: Group) -> None:
    if group.active_classic is not None:
        log.warning("a consumer-protocol member asked to join classic group %s, refused: lakelog does not upgrade a "
                    "classic group online", group.group_id)
        raise GroupIdNotFound(f"group {group.group_id!r} is a classic group with {len(group.active_classic.members)} "
                              "classic-protocol members; lakelog does not upgrade a classic group to the consumer "
                              "protocol online: join it with group.protocol=classic, or with the consumer protocol "
                              "once its classic members have left")
    if group.members and group.kind != CONSUMER:
        log.warning("a consumer-protocol member asked to join group %s of HTTP members", group.group_id)
        raise InconsistentGroupProtocol(f"group {group.group_id!r} has lakelog HTTP members: a consumer-protocol "
                                        "member cannot join it")


def _join(membership: Membership, group_id: str, request: ConsumerHeartbeat, now: float,
          counts: PartitionCounts) -> ConsumerAnswer:
    if not request.member_id:
        raise UnknownMemberId("a member joins with its own member id (ConsumerGroupHeartbeat v1)")
    group = membership.groups.get(group_id)
    if group is not None and request.member_id in group.members:  # joins again: as a new member
        membership.leave(group_id, request.member_id, counts)
    assignor = server_assignor(request.assignor)
    if group is not None and group.members:
        assignor = group.assignor or assignor  # the group's assignor, whichever a later member names
    topics = tuple(request.topics or ())
    options = JoinOptions(topics=topics, pattern=None if topics else request.regex,
                          session_timeout_ms=request.session_timeout_ms, max_poll_interval_ms=NO_POLL_RULE_MS,
                          group_instance_id=request.instance_id, assignor=assignor, can_read=request.can_read)
    membership.join(group_id, options, request.member_id, now, counts, kind=CONSUMER)
    group, member = membership.member(group_id, request.member_id)
    if request.rebalance_timeout_ms is not None and request.rebalance_timeout_ms > 0:
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
    answer = _answer(group, member, resend=True)
    _time_revocation(member, now)  # a static member's new instance may inherit partitions being revoked
    return answer


def _resubscribe(membership: Membership, group: Group, member: Member, request: ConsumerHeartbeat,
                 counts: PartitionCounts) -> None:
    topics = tuple(request.topics) if request.topics is not None else None
    if topics is not None and topics and topics != member.options.topics:
        member.options = dataclasses.replace(member.options, topics=topics, pattern=None)
        member.pattern = None
    elif request.regex is not None and not topics and request.regex != member.options.pattern:
        member.pattern = compile_topic_pattern(request.regex)
        member.options = dataclasses.replace(member.options, topics=(), pattern=request.regex,
                                             can_read=request.can_read)
    else:
        return
    membership.rebalance(group, counts)


def _time_revocation(member: Member, now: float) -> None:
    """Once a member has been told to revoke partitions (this heartbeat's answer), it has its rebalance timeout
    to report them given up; `Membership.tick` fences it after that. Kafka's rule: the timer starts when the
    member is told, and stops when it owns no partition it must give up."""
    if not member.revoking:
        member.revoke_deadline = None
    elif member.revoke_deadline is None:
        member.revoke_deadline = now + member.rebalance_timeout_ms / 1000


def _answer(group: Group, member: Member, resend: bool) -> ConsumerAnswer:
    changed = member.assignment != member.delivered
    if changed or member.epoch == 0:
        member.epoch = group.generation
        member.delivered = set(member.assignment)
    if changed or resend:
        return ConsumerAnswer(member.member_id, member.epoch, sorted(member.assignment))
    return ConsumerAnswer(member.member_id, member.epoch, None)
