"""The consumer-group coordinator: membership, generations, assignment, polls and committed offsets.

Members join, heartbeat, poll, commit and leave through calls on this class
(the HTTP tier translates). The coordinator computes the assignment itself
(range, roundrobin or cooperative-sticky). Every change of assignment starts a
new generation; a commit from another generation is refused. A background
thread removes members whose session (no heartbeat for `session.timeout.ms`)
or poll interval (`max.poll.interval.ms`) expired, runs the delayed first
assignment of a new group (`group.initial.rebalance.delay.ms`) and notices
topics that appear or grow.

Under cooperative-sticky, a partition that changes owner is first revoked:
the old owner learns it in a heartbeat answer (`revoke`), and the partition
goes to its new owner once the old owner heartbeats again (or is removed).
The other partitions keep flowing.

Committed offsets go to `_control/consumer_offsets` through `OffsetStore`;
a commit returns once durable, and a new coordinator reloads them.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import re2

from lakelog.platform.broker import Broker
from lakelog.platform.errors import InvalidRequest, OffsetOutOfRange, UnknownTopicOrPartition
from lakelog.platform.groups.assignors import ASSIGNORS, BY_NAME, is_cooperative
from lakelog.platform.groups.errors import (
    FencedInstanceId,
    GroupIdNotFound,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidGroupId,
    InvalidSessionTimeout,
    NoOffsetForPartition,
    NonEmptyGroup,
    UnknownMemberId,
)
from lakelog.platform.groups.offsets import CommittedOffset, OffsetRow, OffsetStore
from lakelog.platform.records import FetchResult, TopicPartition

log = logging.getLogger(__name__)

GROUP_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
MAX_PATTERN_CHARS = 1000
_RE2 = re2.Options()
_RE2.log_errors = False  # a bad pattern is the caller's error, answered, not logged
RESETS = ("earliest", "latest", "none")
WAIT_SLICE_S = 0.02
METADATA_CHECK_S = 1.0


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


@dataclass(frozen=True)
class Poll:
    generation: int
    results: list[FetchResult]


@dataclass(frozen=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    assignment: list[TopicPartition]
    revoking: list[TopicPartition]
    subscription: list[str]
    pattern: str | None
    last_heartbeat_ms_ago: int


@dataclass(frozen=True)
class GroupView:
    group: str
    state: str
    generation: int
    assignor: str | None
    members: list[MemberView]
    offsets: dict[TopicPartition, CommittedOffset]
    lag: dict[TopicPartition, int]  # log end offset - committed (or - log start when nothing committed)


@dataclass
class _Member:
    member_id: str
    options: JoinOptions
    pattern: Any  # a compiled RE2 pattern, or None for a topic list
    last_heartbeat: float
    last_poll: float
    assignment: set[TopicPartition] = field(default_factory=set)
    revoking: set[TopicPartition] = field(default_factory=set)
    revoke_told: bool = False
    delivered: set[TopicPartition] = field(default_factory=set)
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    cursor: int = 0

    def subscribed(self, topics: dict[str, int]) -> frozenset[str]:
        if self.pattern is not None:
            found = frozenset(t for t in topics if self.pattern.fullmatch(t))
        else:
            found = frozenset(t for t in self.options.topics if t in topics)
        allowed = self.options.can_read
        return found if allowed is None else frozenset(t for t in found if allowed(t))


@dataclass
class _Group:
    group_id: str
    generation: int = 0
    assignor: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    fenced: dict[str, str] = field(default_factory=dict)  # replaced member id -> group.instance.id
    committed: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    assign_at: float | None = None  # the delayed first assignment of a group that was empty
    handoff: dict[TopicPartition, str] = field(default_factory=dict)  # cooperative: waiting on a revoke
    partitions_seen: dict[str, int] = field(default_factory=dict)

    @property
    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.assign_at is not None or self.handoff:
            return "PreparingRebalance"
        return "Stable"


class GroupCoordinator:
    def __init__(
        self,
        broker: Broker,
        initial_rebalance_delay_ms: int = 3000,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 1_800_000,
        commit_linger_ms: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker = broker
        self.initial_delay_s = initial_rebalance_delay_ms / 1000
        self.min_session_ms = min_session_timeout_ms
        self.max_session_ms = max_session_timeout_ms
        self._clock = clock
        self._lock = threading.RLock()
        self._groups: dict[str, _Group] = {}
        self._topics: dict[str, int] = {}
        self._topics_at = -1e9
        self.rebalances = 0
        self.store = OffsetStore(broker.storage, self._durable, commit_linger_ms,
                                 broker.settings.request_timeout_ms)
        for group_id, offsets in self.store.load().items():
            self._groups[group_id] = _Group(group_id, committed=offsets)
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="group-reaper", daemon=True)
        self._reaper.start()

    # ---- membership ---------------------------------------------------------

    def join(self, group_id: str, options: JoinOptions) -> tuple[str, int]:
        """Add a member (or replace a static member's earlier instance); answers (member id, generation)."""
        _check_group_id(group_id)
        pattern = self._check_options(options)
        now = self._clock()
        with self._lock:
            group = self._groups.setdefault(group_id, _Group(group_id))
            if group.members and group.assignor != options.assignor:
                raise InconsistentGroupProtocol(
                    f"group {group_id!r} uses assignor {group.assignor!r}; this member asked for {options.assignor!r}"
                )
            member_id = f"{options.group_instance_id or 'member'}-{uuid.uuid4().hex[:16]}"
            member = _Member(member_id, options, pattern, now, now)
            previous_id = group.instances.get(options.group_instance_id or "")
            if previous_id is not None and previous_id in group.members:
                self._replace_static(group, group.members[previous_id], member)
                return member_id, group.generation
            group.assignor = options.assignor
            group.members[member_id] = member
            if options.group_instance_id:
                group.instances[options.group_instance_id] = member_id
            if len(group.members) == 1 and self.initial_delay_s > 0:
                group.assign_at = now + self.initial_delay_s
            elif group.assign_at is not None:
                group.assign_at = min(max(group.assign_at, now + self.initial_delay_s),
                                      now + options.max_poll_interval_ms / 1000)
            else:
                self._rebalance(group)
            return member_id, group.generation

    def _replace_static(self, group: _Group, old: _Member, new: _Member) -> None:
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
            self._rebalance(group)

    def leave(self, group_id: str, member_id: str) -> None:
        with self._lock:
            group, member = self._member(group_id, member_id)
            self._remove(group, member)

    def heartbeat(self, group_id: str, member_id: str) -> Heartbeat:
        with self._lock:
            group, member = self._member(group_id, member_id)
            member.last_heartbeat = self._clock()
            if member.revoking and member.revoke_told:
                self._revoked(group, member)
            if is_cooperative(group.assignor or ""):
                revoke = sorted(member.revoking)
                member.revoke_told = bool(revoke)
            else:
                revoke = sorted(member.delivered - member.assignment)
            member.delivered = set(member.assignment)
            return Heartbeat(group.generation, sorted(member.assignment), revoke, group.state)

    def _member(self, group_id: str, member_id: str) -> tuple[_Group, _Member]:
        group = self._groups.get(group_id)
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

    def _remove(self, group: _Group, member: _Member) -> None:
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
            self._rebalance(group)

    # ---- assignment -----------------------------------------------------------

    def _rebalance(self, group: _Group) -> None:
        """Compute the target assignment; start a new generation."""
        topics = self._topic_counts()
        subscriptions = {m.member_id: m.subscribed(topics) for m in group.members.values()}
        counts = {t: topics[t] for subs in subscriptions.values() for t in subs}
        owned = {m.member_id: m.assignment | m.revoking for m in group.members.values()}
        target = BY_NAME[group.assignor or "range"](subscriptions, counts, owned)
        group.assign_at = None
        group.partitions_seen = dict(counts)
        group.generation += 1
        self.rebalances += 1
        if is_cooperative(group.assignor or ""):
            self._cooperative(group, target)
        else:
            for member in group.members.values():
                member.assignment = target.get(member.member_id, set())
                member.revoking = set()
                _trim_positions(member)
            group.handoff.clear()
        log.info("group %s generation %d", group.group_id, group.generation,
                 extra={"fields": {"group": group.group_id, "generation": group.generation}})

    def _cooperative(self, group: _Group, target: dict[str, set[TopicPartition]]) -> None:
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
            _trim_positions(member)

    def _revoked(self, group: _Group, member: _Member) -> None:
        """The member gave up its revoked partitions: hand them to their new owners."""
        released, member.revoking, member.revoke_told = member.revoking, set(), False
        self._hand_over(group, released)

    def _hand_over(self, group: _Group, released: Iterable[TopicPartition]) -> None:
        moved = False
        for tp in released:
            new_owner = group.members.get(group.handoff.pop(tp, ""))
            if new_owner is not None:
                new_owner.assignment.add(tp)
                moved = True
        if moved:
            group.generation += 1

    def _topic_counts(self, max_age_s: float = 0.0) -> dict[str, int]:
        now = self._clock()
        if now - self._topics_at > max_age_s:
            self._topics = {t.name: t.partitions for t in self.broker.list_topics()}
            self._topics_at = now
        return self._topics

    # ---- background -----------------------------------------------------------

    def _reap_loop(self) -> None:
        last_metadata = 0.0
        while not self._stop.wait(0.05):
            try:
                check_metadata = self._clock() - last_metadata >= METADATA_CHECK_S
                if check_metadata:
                    last_metadata = self._clock()
                self.tick(check_metadata)
            except Exception:  # keep reaping whatever one pass hit
                log.exception("group maintenance failed")

    def tick(self, check_metadata: bool = False) -> None:
        """Expire members, run due first assignments, follow topic changes."""
        now = self._clock()
        counts = self._topic_counts(METADATA_CHECK_S) if check_metadata else None
        with self._lock:
            for group in list(self._groups.values()):
                self._expire(group, now)
                if group.assign_at is not None and now >= group.assign_at and group.members:
                    self._rebalance(group)
                elif counts is not None and group.members and group.assign_at is None:
                    if self._metadata_changed(group, counts):
                        self._rebalance(group)

    def _expire(self, group: _Group, now: float) -> None:
        for member in list(group.members.values()):
            silent = now - member.last_heartbeat > member.options.session_timeout_ms / 1000
            stalled = now - member.last_poll > member.options.max_poll_interval_ms / 1000
            if silent or stalled:
                log.info("removing member %s of %s (%s)", member.member_id, group.group_id,
                         "session timeout" if silent else "max.poll.interval.ms passed")
                self._remove(group, member)

    def _metadata_changed(self, group: _Group, counts: dict[str, int]) -> bool:
        wanted: dict[str, int] = {}
        for member in group.members.values():
            for topic in member.subscribed(counts):
                wanted[topic] = counts[topic]
        return wanted != group.partitions_seen

    # ---- polling --------------------------------------------------------------

    def poll(self, group_id: str, member_id: str, max_records: int = 500, max_bytes: int | None = None,
             timeout_ms: int = 0, authorize: Callable[[str], None] | None = None) -> Poll:
        """Records from the member's partitions, fairly: each partition gets a share, in rotating order.

        `authorize(topic)` raises when the caller may no longer read a topic: checked on every poll,
        since a right revoked after the join must stop the records at once."""
        if max_records < 1:
            raise InvalidRequest(f"max_records must be >= 1, got {max_records}")
        deadline = self._clock() + max(timeout_ms, 0) / 1000
        self._auto_commit(group_id, member_id)
        turn = 0
        while True:
            generation, plan = self._poll_plan(group_id, member_id)
            if authorize is not None:
                for topic in sorted({tp[0] for tp, _ in plan}):
                    authorize(topic)
            results, out_of_range = self._fetch_fairly(plan, max_records, max_bytes)
            for tp in out_of_range:
                self.reset_position(group_id, member_id, tp)
            if results:
                return Poll(generation, self._advance(group_id, member_id, results))
            remaining = deadline - self._clock()
            if remaining <= 0 or not plan:
                if remaining > 0:
                    time.sleep(min(remaining, WAIT_SLICE_S * 5))
                    continue
                return Poll(generation, [])
            (topic, partition), offset = plan[turn % len(plan)]
            turn += 1
            try:  # wait for data on one partition for a slice, then look at all again
                self.broker.fetch(topic, partition, offset, 1, None, int(min(remaining, WAIT_SLICE_S) * 1000))
            except (OffsetOutOfRange, UnknownTopicOrPartition):
                pass

    def _poll_plan(self, group_id: str, member_id: str) -> tuple[int, list[tuple[TopicPartition, int]]]:
        with self._lock:
            group, member = self._member(group_id, member_id)
            now = self._clock()
            member.last_poll = member.last_heartbeat = now
            partitions = sorted(member.assignment)
            missing = [tp for tp in partitions if tp not in member.positions]
            generation = group.generation
            committed = {tp: group.committed.get(tp) for tp in missing}
            reset = member.options.auto_offset_reset
            if partitions:
                member.cursor = (member.cursor + 1) % len(partitions)
            cursor = member.cursor
        found = {tp: self._initial_position(tp, committed[tp], reset) for tp in missing}
        with self._lock:
            group, member = self._member(group_id, member_id)
            for tp, offset in found.items():
                if tp in member.assignment:
                    member.positions.setdefault(tp, offset)
            plan = [(tp, member.positions[tp]) for tp in partitions if tp in member.positions]
        return generation, plan[cursor % len(plan):] + plan[:cursor % len(plan)] if plan else []

    def _initial_position(self, tp: TopicPartition, committed: CommittedOffset | None, reset: str) -> int:
        if committed is not None:
            try:
                self.broker.check_offset(tp[0], tp[1], committed.offset)
                return committed.offset
            except OffsetOutOfRange:
                if reset == "none":
                    raise NoOffsetForPartition(
                        f"committed offset {committed.offset} of {tp[0]}-{tp[1]} is out of range and "
                        "auto.offset.reset is none") from None
        elif reset == "none":
            raise NoOffsetForPartition(f"no committed offset for {tp[0]}-{tp[1]} and auto.offset.reset is none")
        return self.broker.list_offset(tp[0], tp[1], reset)

    def _fetch_fairly(self, plan: list[tuple[TopicPartition, int]], max_records: int,
                      max_bytes: int | None) -> tuple[list[FetchResult], list[TopicPartition]]:
        if not plan:
            return [], []
        share = max(-(-max_records // len(plan)), 1)
        budget, bytes_left = max_records, max_bytes
        results: list[FetchResult] = []
        out_of_range: list[TopicPartition] = []
        for (topic, partition), offset in plan:
            if budget <= 0 or (bytes_left is not None and bytes_left <= 0):
                break
            try:
                result = self.broker.fetch(topic, partition, offset, min(share, budget), bytes_left, 0)
            except OffsetOutOfRange:
                out_of_range.append((topic, partition))  # retention passed it: auto.offset.reset applies
                continue
            except UnknownTopicOrPartition:
                continue  # the topic was deleted: the next metadata check rebalances
            if result.records.num_rows:
                results.append(result)
                budget -= result.records.num_rows
                if bytes_left is not None:
                    bytes_left -= result.records.nbytes
        return results, out_of_range

    def _advance(self, group_id: str, member_id: str, results: list[FetchResult]) -> list[FetchResult]:
        kept = []
        with self._lock:
            group, member = self._member(group_id, member_id)
            for result in results:
                tp = (result.topic, result.partition)
                if tp in member.assignment and result.next_offset is not None:
                    first = int(result.records.column("offset")[0].as_py())
                    if member.positions.get(tp, first) <= first:
                        member.positions[tp] = result.next_offset
                        kept.append(result)
        return kept

    def reset_position(self, group_id: str, member_id: str, tp: TopicPartition) -> None:
        """After OFFSET_OUT_OF_RANGE: forget the position, so the next poll applies auto.offset.reset."""
        with self._lock:
            _, member = self._member(group_id, member_id)
            member.positions.pop(tp, None)

    def _auto_commit(self, group_id: str, member_id: str) -> None:
        """enable.auto.commit: at each poll, commit the positions reached by the previous polls."""
        with self._lock:
            group, member = self._member(group_id, member_id)
            if not member.options.enable_auto_commit:
                return
            due = {tp: o for tp, o in member.positions.items() if tp in member.assignment and
                   (group.committed.get(tp) is None or group.committed[tp].offset != o)}
            rows = [OffsetRow(group_id, t, p, o, None, group.generation) for (t, p), o in due.items()]
        if rows:
            self.store.submit(rows)

    # ---- offsets --------------------------------------------------------------

    def commit(self, group_id: str, member_id: str | None, generation: int,
               offsets: list[tuple[str, int, int, str | None]]) -> Future:
        """Validate and queue a commit; the future completes once the offsets are durable."""
        _check_group_id(group_id)
        for topic, partition, offset, _ in offsets:
            if offset < 0:
                raise InvalidRequest(f"offset for {topic}-{partition} must be >= 0, got {offset}")
            meta = self.broker.topic(topic)
            if not 0 <= partition < meta.partitions:
                raise UnknownTopicOrPartition(
                    f"unknown partition {partition} of topic {topic!r} (partitions 0..{meta.partitions - 1})")
        with self._lock:
            group = self._groups.get(group_id)
            if member_id:
                group, member = self._member(group_id, member_id)
                if generation != group.generation:
                    raise IllegalGeneration(
                        f"generation {generation} is not the group's current generation {group.generation}; "
                        "heartbeat to get the new assignment, then commit again")
                member.last_heartbeat = self._clock()
            elif group is not None and group.members:
                raise IllegalGeneration(
                    f"group {group_id!r} has active members: commit with a member_id and the current generation")
            else:
                self._groups.setdefault(group_id, _Group(group_id))
            rows = [OffsetRow(group_id, t, p, o, m, generation) for t, p, o, m in offsets]
        return self.store.submit(rows)

    def _durable(self, rows: list[OffsetRow], stamp: int) -> None:
        with self._lock:
            for row in rows:
                group = self._groups.setdefault(row.group, _Group(row.group))
                group.committed[(row.topic, row.partition)] = CommittedOffset(row.offset, row.metadata, stamp)

    def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                raise GroupIdNotFound(f"unknown group {group_id!r}")
            return dict(group.committed)

    def reset_offsets(self, group_id: str, spec: str | int | None, topics: list[str] | None,
                      explicit: list[tuple[str, int, int]] | None,
                      authorize: Callable[[str], None] | None = None) -> Future:
        """Move an empty group's offsets: earliest, latest, a timestamp (ms), or explicit offsets.

        `authorize(topic)` is called for every topic touched before anything is written."""
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                raise GroupIdNotFound(f"unknown group {group_id!r}")
            if group.members:
                raise NonEmptyGroup(f"group {group_id!r} has {len(group.members)} active members; "
                                    "offsets can only be reset while it is empty")
            known = sorted({t for t, _ in group.committed})
        touched = sorted({t for t, _, _ in explicit} if explicit is not None else set(topics or known))
        if authorize is not None:
            for topic in touched:
                authorize(topic)
        if explicit is not None:
            return self.commit(group_id, None, -1, [(t, p, o, None) for t, p, o in explicit])
        rows = []
        for topic in topics if topics is not None else known:
            meta = self.broker.topic(topic)
            for partition in range(meta.partitions):
                rows.append((topic, partition, self.broker.list_offset(topic, partition, spec), None))
        if not rows:
            raise InvalidRequest("nothing to reset: name topics, or commit offsets first")
        return self.commit(group_id, None, -1, rows)

    # ---- description ------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted((g.group_id, g.state) for g in self._groups.values())

    def describe(self, group_id: str) -> GroupView:
        now = self._clock()
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                raise GroupIdNotFound(f"unknown group {group_id!r}")
            members = [
                MemberView(m.member_id, m.options.group_instance_id, sorted(m.assignment), sorted(m.revoking),
                           sorted(m.options.topics), m.options.pattern, int((now - m.last_heartbeat) * 1000))
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ]
            committed = dict(group.committed)
            owned = {tp for m in group.members.values() for tp in m.assignment | m.revoking}
            view = GroupView(group_id, group.state, group.generation, group.assignor, members, committed, {})
        view.lag.update(self._lag(committed, owned))
        return view

    def _lag(self, committed: dict[TopicPartition, CommittedOffset],
             owned: set[TopicPartition]) -> dict[TopicPartition, int]:
        lag = {}
        for tp in sorted(set(committed) | owned):
            try:
                end = self.broker.topic_log(tp[0]).log_end_offset(tp[1])
                start = committed[tp].offset if tp in committed else self.broker.topic_log(tp[0]).log_start_offset(
                    tp[1])
            except UnknownTopicOrPartition:
                continue
            lag[tp] = max(end - start, 0)
        return lag

    def group_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)

    # ---- lifecycle --------------------------------------------------------------

    def _check_options(self, options: JoinOptions) -> Any:
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

    def close(self) -> None:
        """Stop the maintenance thread and write pending commits."""
        self._stop.set()
        self._reaper.join()
        self.store.close()


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


def _trim_positions(member: _Member) -> None:
    member.positions = {tp: o for tp, o in member.positions.items() if tp in member.assignment}


def _check_group_id(group_id: str) -> None:
    if not isinstance(group_id, str) or not GROUP_NAME.match(group_id):
        raise InvalidGroupId(f"group id must be 1-249 characters of [a-zA-Z0-9._-], got {group_id!r}")
