"""Group membership as a state machine: join, heartbeat, leave, expire, rebalance.

Pure: every call takes the time (`now`, monotonic seconds) and, where an assignment may be computed, a
snapshot of partition counts per topic (`counts`); it changes only this object and answers decisions.
No threads, no storage, no clock: the coordinator owns those, and calls in here under its lock.

Every change of assignment starts a new generation. Under cooperative-sticky, a partition that changes
owner is first revoked: the old owner learns it in a heartbeat answer (`revoke`), and the partition goes
to its new owner once the old owner heartbeats again (or is removed). The other partitions keep flowing.
A group that was empty waits `group.initial.rebalance.delay.ms` for members before its first assignment.

A group's members are of one kind (`Group.kind`): lakelog's HTTP members, or KIP-848's consumer-protocol
members (`consumer_group.py` drives them through this machine: always incremental revocation, no first
delay, no poll-interval rule, since their clients enforce max.poll.interval.ms themselves). Kafka's classic
members live in `Group.classic`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import re2

from lakelog.platform.errors import InvalidRequest
from lakelog.platform.groups.assignors import ASSIGNORS, BY_NAME, is_cooperative
from lakelog.platform.groups.classic import ClassicGroup
from lakelog.platform.groups.errors import (
    FencedInstanceId,
    InconsistentGroupProtocol,
    InvalidGroupId,
    InvalidSessionTimeout,
    UnknownMemberId,
)
from lakelog.platform.groups.offsets import CommittedOffset
from lakelog.platform.records import TopicPartition

log = logging.getLogger(__name__)

MAX_PATTERN_CHARS = 1000
RESETS = ("earliest", "latest", "none")
_RE2 = re2.Options()
_RE2.log_errors = False  # a bad pattern is the caller's error, answered, not logged

PartitionCounts = Mapping[str, int]  # topic -> partition count, a snapshot of the catalog
HTTP, CONSUMER = "http", "consumer"  # the kinds of `Group.members`


@dataclass(frozen=True)
class JoinOptions:
    """A member's subscription and settings (Kafka consumer names in the HTTP tier)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    session_timeout_ms: int = 45_000
    max_poll_interval_ms: int = 300_000
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    group_instance_id: str | None = None
    assignor: str = "range"
    # Which topics the member may read (access control); a pattern subscription only gets those.
    can_read: Callable[[str], bool] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Heartbeat:
    generation: int
    assignment: list[TopicPartition]
    revoke: list[TopicPartition]
    state: str


@dataclass
class Member:
    member_id: str
    options: JoinOptions
    pattern: Any  # a compiled RE2 pattern, or None for a topic list
    last_heartbeat: float
    last_poll: float
    assignment: set[TopicPartition] = field(default_factory=set)
    revoking: set[TopicPartition] = field(default_factory=set)
    revoke_told: bool = False
    delivered: set[TopicPartition] = field(default_factory=set)
    positions: dict[TopicPartition, int] = field(default_factory=dict)  # the next offset to read
    polls: int = 0  # the number of the last poll answered with records
    before_poll: dict[int, dict[TopicPartition, int]] = field(default_factory=dict)  # poll n -> positions it moved
    answers: int = 0  # poll answers given so far, numbered or not: a poll that sees it move was overtaken
    requests: int = 0  # the highest poll request number the member sent (`positions.start`)
    cursor: int = 0  # where the next poll starts, so partitions take turns
    epoch: int = 0  # a consumer-protocol member's epoch: the generation its answered assignment dates from
    # A consumer-protocol member told to revoke partitions must report them given up by then (its rebalance
    # timeout after it was told, `consumer_group.py`), or it is fenced: removed, and its partitions move.
    revoke_deadline: float | None = None
    rebalance_timeout_ms: int = 300_000  # Kafka's default max.poll.interval.ms, for a member that named none

    def subscribed(self, topics: PartitionCounts) -> frozenset[str]:
        if self.pattern is not None:
            found = frozenset(t for t in topics if self.pattern.fullmatch(t))
        else:
            found = frozenset(t for t in self.options.topics if t in topics)
        allowed = self.options.can_read
        return found if allowed is None else frozenset(t for t in found if allowed(t))

    def trim_positions(self) -> None:
        self.positions = {tp: o for tp, o in self.positions.items() if tp in self.assignment}


@dataclass
class Group:
    group_id: str
    generation: int = 0
    assignor: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    fenced: dict[str, str] = field(default_factory=dict)  # replaced member id -> group.instance.id
    committed: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    assign_at: float | None = None  # the delayed first assignment of a group that was empty
    handoff: dict[TopicPartition, str] = field(default_factory=dict)  # cooperative: waiting on a revoke
    partitions_seen: dict[str, int] = field(default_factory=dict)
    classic: ClassicGroup | None = None  # Kafka clients' members (the classic protocol), never mixed with these
    kind: str = HTTP  # whose `members` these are: lakelog's HTTP members or KIP-848's (CONSUMER)

    @property
    def group_type(self) -> str:
        """Kafka's group type (ListGroups v5): "consumer" for KIP-848's groups, "classic" for the others (HTTP
        groups included, as they always showed)."""
        return CONSUMER if self.kind == CONSUMER and self.active_classic is None else "classic"

    @property
    def incremental(self) -> bool:
        """Whether a partition moves only once its old owner gave it up (cooperative; always for KIP-848)."""
        return self.kind == CONSUMER or is_cooperative(self.assignor or "")

    @property
    def kafka_members(self) -> bool:
        return self.active_classic is not None

    @property
    def active_classic(self) -> ClassicGroup | None:
        """The classic group while it has members (Kafka clients'), else None."""
        return self.classic if self.classic is not None and not self.classic.empty else None

    @property
    def state(self) -> str:
        if self.classic is not None and not self.classic.empty:  # kafka_members
            return self.classic.state
        if not self.members:
            return "Empty"
        if self.assign_at is not None or self.handoff:
            return "PreparingRebalance"
        return "Stable"


class Membership:
    def __init__(self, initial_rebalance_delay_ms: int = 3000, min_session_timeout_ms: int = 1000,
                 max_session_timeout_ms: int = 1_800_000) -> None:
        self.initial_delay_s = initial_rebalance_delay_ms / 1000
        self.min_session_ms = min_session_timeout_ms
        self.max_session_ms = max_session_timeout_ms
        self.groups: dict[str, Group] = {}
        self.rebalances = 0

    # ---- members ------------------------------------------------------------

    def check_options(self, options: JoinOptions) -> Any:
        """Refuse a bad subscription before anything changes; answers the compiled pattern (or None)."""
        if options.assignor not in ASSIGNORS:
            raise InvalidRequest(f"assignor must be one of {', '.join(ASSIGNORS)}, got {options.assignor!r}")
        if options.auto_offset_reset not in RESETS:
            raise InvalidRequest(f"auto.offset.reset must be one of {', '.join(RESETS)}")
        if not self.min_session_ms <= options.session_timeout_ms <= self.max_session_ms:
            raise InvalidSessionTimeout(
                f"session.timeout.ms must be between {self.min_session_ms} and {self.max_session_ms}, "
                f"got {options.session_timeout_ms}")
        if options.max_poll_interval_ms < 1:
            raise InvalidRequest("max.poll.interval.ms must be >= 1")
        if bool(options.topics) == bool(options.pattern):
            raise InvalidRequest("subscribe with either topics or a pattern")
        return None if options.pattern is None else compile_topic_pattern(options.pattern)

    def join(self, group_id: str, options: JoinOptions, member_id: str, now: float,
             counts: PartitionCounts, kind: str = HTTP) -> tuple[str, int]:
        """Add a member (or replace a static member's earlier instance); answers (member id, generation)."""
        check_group_id(group_id)
        pattern = self.check_options(options)
        group = self.groups.setdefault(group_id, Group(group_id))
        if group.kafka_members:
            raise InconsistentGroupProtocol(
                f"group {group_id!r} has classic Kafka-protocol members: a {kind} member cannot join it")
        if group.members and group.kind != kind:
            log.warning("a %s member asked to join group %s of %s members", kind, group_id, group.kind)
            raise InconsistentGroupProtocol(
                f"group {group_id!r} has {group.kind} members: a {kind} member cannot join it")
        group.kind = kind
        if group.members and group.assignor != options.assignor:
            raise InconsistentGroupProtocol(
                f"group {group_id!r} uses assignor {group.assignor!r}; this member asked for {options.assignor!r}"
            )
        member = Member(member_id, options, pattern, now, now)
        previous_id = group.instances.get(options.group_instance_id or "")
        if previous_id is not None and previous_id in group.members:
            self._replace_static(group, group.members[previous_id], member, counts)
            return member_id, group.generation
        group.assignor = options.assignor
        group.members[member_id] = member
        if options.group_instance_id:
            group.instances[options.group_instance_id] = member_id
        if len(group.members) == 1 and self.initial_delay_s > 0 and kind == HTTP:
            group.assign_at = now + self.initial_delay_s
        elif group.assign_at is not None:
            group.assign_at = min(max(group.assign_at, now + self.initial_delay_s),
                                  now + options.max_poll_interval_ms / 1000)
        else:
            self.rebalance(group, counts)
        return member_id, group.generation

    def _replace_static(self, group: Group, old: Member, new: Member, counts: PartitionCounts) -> None:
        """A static member restarted: the new instance takes the old one's partitions, no rebalance."""
        new.assignment, new.revoking, new.delivered = old.assignment, old.revoking, set()
        del group.members[old.member_id]
        group.fenced[old.member_id] = new.options.group_instance_id or ""
        while len(group.fenced) > 1000:
            group.fenced.pop(next(iter(group.fenced)))
        group.members[new.member_id] = new
        group.instances[new.options.group_instance_id or ""] = new.member_id
        for tp, owner in group.handoff.items():
            if owner == old.member_id:
                group.handoff[tp] = new.member_id
        if old.options.topics != new.options.topics or old.options.pattern != new.options.pattern:
            self.rebalance(group, counts)

    def leave(self, group_id: str, member_id: str, counts: PartitionCounts) -> None:
        group, member = self.member(group_id, member_id)
        self._remove(group, member, counts)

    def heartbeat(self, group_id: str, member_id: str, now: float) -> Heartbeat:
        group, member = self.member(group_id, member_id)
        member.last_heartbeat = now
        if member.revoking and member.revoke_told:
            self._revoked(group, member)
        if group.incremental:
            revoke = sorted(member.revoking)
            member.revoke_told = bool(revoke)
        else:
            revoke = sorted(member.delivered - member.assignment)
        member.delivered = set(member.assignment)
        return Heartbeat(group.generation, sorted(member.assignment), revoke, group.state)

    def member(self, group_id: str, member_id: str) -> tuple[Group, Member]:
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownMemberId(f"unknown group {group_id!r} (join first)")
        member = group.members.get(member_id)
        if member is None:
            if member_id in group.fenced:
                raise FencedInstanceId(
                    f"member {member_id!r} was replaced by a newer instance of {group.fenced[member_id]!r}"
                )
            raise UnknownMemberId(f"unknown member {member_id!r} of group {group_id!r}; join again")
        return group, member

    def _remove(self, group: Group, member: Member, counts: PartitionCounts) -> None:
        del group.members[member.member_id]
        if member.options.group_instance_id and group.instances.get(member.options.group_instance_id) == \
                member.member_id:
            del group.instances[member.options.group_instance_id]
        if not group.members:
            group.assign_at = None
            group.handoff.clear()
            group.generation += 1
            return
        if group.assign_at is None:
            self.rebalance(group, counts)

    # ---- time passing --------------------------------------------------------

    def tick(self, now: float, counts: PartitionCounts, check_metadata: bool = False) -> None:
        """Expire members, run due first assignments, and (`check_metadata`) follow topic changes."""
        for group in list(self.groups.values()):
            self._expire(group, now, counts)
            if group.assign_at is not None and now >= group.assign_at and group.members:
                self.rebalance(group, counts)
            elif check_metadata and group.members and group.assign_at is None and \
                    self._metadata_changed(group, counts):
                self.rebalance(group, counts)

    def _expire(self, group: Group, now: float, counts: PartitionCounts) -> None:
        for member in list(group.members.values()):
            silent = now - member.last_heartbeat > member.options.session_timeout_ms / 1000
            stalled = group.kind == HTTP and now - member.last_poll > member.options.max_poll_interval_ms / 1000
            late = member.revoke_deadline is not None and now > member.revoke_deadline and bool(member.revoking)
            if silent or stalled or late:
                reason = "session timeout" if silent else "max.poll.interval.ms passed" if stalled else \
                    f"partitions {sorted(member.revoking)} not revoked within its rebalance timeout"
                log.info("removing member %s of %s (%s)", member.member_id, group.group_id, reason)
                self._remove(group, member, counts)

    def _metadata_changed(self, group: Group, counts: PartitionCounts) -> bool:
        wanted: dict[str, int] = {}
        for member in group.members.values():
            for topic in member.subscribed(counts):
                wanted[topic] = counts[topic]
        return wanted != group.partitions_seen

    # ---- assignment -----------------------------------------------------------

    def rebalance(self, group: Group, counts: PartitionCounts) -> None:
        """Compute the target assignment; start a new generation."""
        subscriptions = {m.member_id: m.subscribed(counts) for m in group.members.values()}
        subscribed = {t: counts[t] for subs in subscriptions.values() for t in subs}
        owned = {m.member_id: m.assignment | m.revoking for m in group.members.values()}
        target = BY_NAME[group.assignor or "range"](subscriptions, subscribed, owned)
        group.assign_at = None
        group.partitions_seen = dict(subscribed)
        group.generation += 1
        self.rebalances += 1
        if group.incremental:
            self._cooperative(group, target)
        else:
            for member in group.members.values():
                member.assignment = target.get(member.member_id, set())
                member.revoking = set()
                member.trim_positions()
            group.handoff.clear()
        log.info("group %s generation %d", group.group_id, group.generation,
                 extra={"fields": {"group": group.group_id, "generation": group.generation}})

    def _cooperative(self, group: Group, target: dict[str, set[TopicPartition]]) -> None:
        owner = {tp: m.member_id for m in group.members.values() for tp in m.assignment | m.revoking}
        group.handoff = {}
        for member in group.members.values():
            wanted = target.get(member.member_id, set())
            member.revoking |= member.assignment - wanted
            member.assignment &= wanted
            if member.revoking:
                member.revoke_told = False
            for tp in wanted - member.assignment:
                holder = owner.get(tp)
                if holder is None or holder == member.member_id:
                    member.assignment.add(tp)
                    member.revoking.discard(tp)
                else:
                    group.handoff[tp] = member.member_id
            member.trim_positions()

    def _revoked(self, group: Group, member: Member) -> None:
        """The member gave up its revoked partitions: hand them to their new owners."""
        released, member.revoking, member.revoke_told = member.revoking, set(), False
        self._hand_over(group, released)

    def release(self, group: Group, member: Member, released: set[TopicPartition]) -> None:
        """A member reported it no longer owns these of its revoked partitions: hand them over."""
        member.revoking -= released
        if not member.revoking:
            member.revoke_told = False
        self._hand_over(group, released)

    def _hand_over(self, group: Group, released: Iterable[TopicPartition]) -> None:
        moved = False
        for tp in released:
            new_owner = group.members.get(group.handoff.pop(tp, ""))
            if new_owner is not None:
                new_owner.assignment.add(tp)
                moved = True
        if moved:
            group.generation += 1


def check_group_id(group_id: str) -> None:
    """Any non-empty string, as Kafka takes it (librdkafka's tests name a group "roundrobin,range"): where an
    id reaches storage it is encoded there (`offsets.py` quotes it in predicates, `transactions/staging.py`
    names files after it)."""
    if not isinstance(group_id, str) or not group_id:
        raise InvalidGroupId(f"a group id must be a non-empty string, got {group_id!r}")


def compile_topic_pattern(pattern: str) -> Any:
    """A subscription pattern, compiled once per member, matched in linear time (RE2 never backtracks):
    no pattern can stall the server however often subscriptions are matched against topic names."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidRequest(f"topic pattern is {len(pattern)} characters; the limit is {MAX_PATTERN_CHARS}")
    try:
        return re2.compile(pattern, _RE2)
    except re2.error as exc:
        message = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise InvalidRequest(f"bad topic pattern {pattern!r}: {message} (RE2 syntax: no backreferences or "
                             "lookaround)") from None
