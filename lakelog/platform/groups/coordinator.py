"""The consumer-group coordinator: the lock, the background reaper and all I/O around the membership
state machine (`membership.py`) and consumer positions (`positions.py`).

Members join, heartbeat, poll, commit and leave through calls on this class (the HTTP tier
translates). Storage I/O — the catalog's partition counts, fetches, offset lookups — runs outside the
lock, so a slow store never stalls a heartbeat. A background thread expires members whose session
(`session.timeout.ms`) or poll interval (`max.poll.interval.ms`) passed, runs delayed first
assignments and follows topics that appear or grow.

Committed offsets go to `_control/consumer_offsets` through `OffsetStore`; a commit returns once
durable, and a new coordinator reloads them.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Callable

from lakelog.platform.broker import Broker
from lakelog.platform.errors import InvalidRequest, UnknownTopicOrPartition
from lakelog.platform.cluster.errors import NotCoordinator
from lakelog.platform.groups import admin, offsets_topic, positions
from lakelog.platform.groups.classic import (
    ClassicGroup,
    JoinRequest,
    consumer_assignment,
    consumer_subscription,
)
from lakelog.platform.groups.errors import (
    GroupIdNotFound,
    GroupSubscribedToTopic,
    IllegalGeneration,
    InconsistentGroupProtocol,
    NonEmptyGroup,
    UnknownMemberId,
)
from lakelog.platform.groups.membership import (
    Group,
    Heartbeat,
    JoinOptions,
    Membership,
    PartitionCounts,
    check_group_id,
)
from lakelog.platform.groups.offsets import CommittedOffset, OffsetRow, OffsetStore
from lakelog.platform.records import FetchResult, TopicPartition

log = logging.getLogger(__name__)

METADATA_CHECK_S = 1.0
REAP_INTERVAL_S = 0.05


@dataclass(frozen=True)
class Poll:
    generation: int
    results: list[FetchResult]
    number: int = 0  # the member acknowledges it with its next poll (`after`)


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
class ClassicMemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # its subscription in the group's protocol
    assignment: bytes  # as the leader assigned it


@dataclass(frozen=True)
class ClassicView:
    state: str
    protocol_type: str | None
    protocol_name: str | None
    members: list[ClassicMemberView]


@dataclass(frozen=True)
class GroupView:
    group: str
    state: str
    generation: int
    assignor: str | None
    members: list[MemberView]
    offsets: dict[TopicPartition, CommittedOffset]
    lag: dict[TopicPartition, int]  # log end offset - committed (or - log start when nothing committed)


def _classic_members(classic: ClassicGroup, now: float) -> list[MemberView]:
    """Kafka-protocol members as HTTP describes members: subscriptions and assignments read from the
    consumer protocol's bytes."""
    return [MemberView(m.member_id, m.group_instance_id, consumer_assignment(m.assignment), [],
                       sorted(consumer_subscription(m.metadata(classic.protocol_name))), None,
                       int((now - m.last_heartbeat) * 1000))
            for m in sorted(classic.members.values(), key=lambda m: m.member_id)]


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
        self._clock = clock
        self._lock = threading.RLock()
        self.membership = Membership(initial_rebalance_delay_ms, min_session_timeout_ms, max_session_timeout_ms)
        self._counts: dict[str, int] = {}
        self._counts_at = -1e9
        self.store = OffsetStore(broker.storage, self._durable, commit_linger_ms,
                                 broker.settings.request_timeout_ms)
        for group_id, offsets in self.store.load().items():
            self.membership.groups[group_id] = Group(group_id, committed=offsets)
        self._stop = threading.Event()
        self._taking_over: dict[str, int] = {}  # group -> the takeover (a count) that will serve it
        self._takeovers = 0
        self._reaper = threading.Thread(target=self._reap_loop, name="group-reaper", daemon=True)
        self._reaper.start()

    @property
    def rebalances(self) -> int:
        return self.membership.rebalances

    # ---- membership ---------------------------------------------------------

    def join(self, group_id: str, options: JoinOptions) -> tuple[str, int]:
        """Add a member (or replace a static member's earlier instance); answers (member id, generation)."""
        check_group_id(group_id)
        self.membership.check_options(options)  # bad input is refused before any I/O
        counts = self._partition_counts()
        member_id = f"{options.group_instance_id or 'member'}-{uuid.uuid4().hex[:16]}"
        with self._lock:
            return self.membership.join(group_id, options, member_id, self._clock(), counts)

    def leave(self, group_id: str, member_id: str) -> None:
        counts = self._partition_counts()
        with self._lock:
            self.membership.leave(group_id, member_id, counts)

    def heartbeat(self, group_id: str, member_id: str) -> Heartbeat:
        with self._lock:  # memory only: safe on the event loop
            return self.membership.heartbeat(group_id, member_id, self._clock())

    def _partition_counts(self, max_age_s: float = 0.0) -> PartitionCounts:
        """topic -> partitions from the catalog (storage I/O: never called under the lock)."""
        if self._clock() - self._counts_at > max_age_s:
            self._counts = {t.name: t.partitions for t in self.broker.list_topics()}
            self._counts_at = self._clock()
        return self._counts

    # ---- background -----------------------------------------------------------

    def _reap_loop(self) -> None:
        last_metadata = -1e9
        while not self._stop.wait(REAP_INTERVAL_S):
            try:
                check_metadata = self._clock() - last_metadata >= METADATA_CHECK_S
                if check_metadata:
                    last_metadata = self._clock()
                self.tick(check_metadata)
            except Exception:  # keep reaping whatever one pass hit
                log.exception("group maintenance failed")

    def tick(self, check_metadata: bool = False) -> None:
        """Expire members, run due first assignments, follow topic changes."""
        counts = self._partition_counts(METADATA_CHECK_S)
        with self._lock:
            now = self._clock()
            self.membership.tick(now, counts, check_metadata)
            for group in self.membership.groups.values():
                if group.classic is not None:
                    group.classic.tick(now)

    # ---- polling --------------------------------------------------------------

    def poll(self, group_id: str, member_id: str, max_records: int = 500, max_bytes: int | None = None,
             timeout_ms: int = 0, authorize: Callable[[str], None] | None = None, after: int | None = None) -> Poll:
        """Records from the member's partitions, fairly (see positions.py); waits up to `timeout_ms` for a
        commit when there is nothing to read.

        `after`: the number of the last poll the member received; if the one after it was lost on its way,
        its records come again (`positions.acknowledge`). Without it, every answer counts as received.

        `authorize(topic)` raises when the caller may no longer read a topic: checked on every poll,
        since a right revoked after the join must stop the records at once."""
        if max_records < 1:
            raise InvalidRequest(f"max_records must be >= 1, got {max_records}")
        deadline = self._clock() + max(timeout_ms, 0) / 1000
        with self._lock:  # before the auto-commit: a lost answer's records are not committed past
            positions.acknowledge(self.membership.member(group_id, member_id)[1], after)
        self._auto_commit(group_id, member_id)
        wait_s = self.broker.settings.refresh_interval_ms / 1000  # other writers' commits are seen by refresh
        while True:
            generation, plan = self._poll_plan(group_id, member_id)
            if authorize is not None:
                for topic in sorted({tp[0] for tp, _ in plan}):
                    authorize(topic)
            results, out_of_range = positions.fetch_fairly(self.broker, plan, max_records, max_bytes)
            for tp in out_of_range:
                self.reset_position(group_id, member_id, tp)
            if results:
                with self._lock:
                    _, member = self.membership.member(group_id, member_id)
                    return Poll(generation, positions.advance(member, results, after), member.polls)
            remaining = deadline - self._clock()
            if remaining <= 0:
                with self._lock:
                    return Poll(generation, [], self.membership.member(group_id, member_id)[1].polls)
            self.broker.wait_for_commit(min(remaining, wait_s))

    def _poll_plan(self, group_id: str, member_id: str) -> tuple[int, positions.Plan]:
        with self._lock:
            _, member = self.membership.member(group_id, member_id)
            starting = any(tp not in member.positions for tp in member.assignment)
        if starting:
            wait(self.commits_in_flight(group_id), self.broker.settings.request_timeout_ms / 1000)
        with self._lock:
            group, member = self.membership.member(group_id, member_id)
            member.last_poll = member.last_heartbeat = self._clock()
            partitions = sorted(member.assignment)
            missing = [tp for tp in partitions if tp not in member.positions]
            generation = group.generation
            committed = {tp: group.committed.get(tp) for tp in missing}
            reset = member.options.auto_offset_reset
            if partitions:
                member.cursor = (member.cursor + 1) % len(partitions)
            cursor = member.cursor
        found = {tp: positions.initial_position(self.broker, tp, committed[tp], reset) for tp in missing}
        with self._lock:
            group, member = self.membership.member(group_id, member_id)
            for tp, offset in found.items():
                if tp in member.assignment:
                    member.positions.setdefault(tp, offset)
            plan = [(tp, member.positions[tp]) for tp in partitions if tp in member.positions]
        return generation, positions.rotated(plan, cursor)

    def reset_position(self, group_id: str, member_id: str, tp: TopicPartition) -> None:
        """After OFFSET_OUT_OF_RANGE: forget the position, so the next poll applies auto.offset.reset."""
        with self._lock:
            _, member = self.membership.member(group_id, member_id)
            member.positions.pop(tp, None)

    def _auto_commit(self, group_id: str, member_id: str) -> None:
        with self._lock:
            rows = positions.auto_commit_rows(*self.membership.member(group_id, member_id))
        if rows:
            self.store.submit(rows)

    # ---- offsets --------------------------------------------------------------

    def commit(self, group_id: str, member_id: str | None, generation: int,
               offsets: list[tuple[str, int, int, str | None]], group_instance_id: str | None = None) -> Future:
        """Validate and queue a commit; the future completes once the offsets are durable.

        A group of Kafka-protocol members checks the member and generation its own way (classic.py).
        Offsets are not checked against the log: a client may store -1 or -2 (KafkaJS's resetOffsets) and
        resolve them itself; the HTTP API validates its own input."""
        check_group_id(group_id)
        for topic, partition, _, _ in offsets:
            count = offsets_topic.PARTITIONS if topic == offsets_topic.OFFSETS_TOPIC else self.broker.topic(
                topic).partitions
            if not 0 <= partition < count:
                raise UnknownTopicOrPartition(
                    f"unknown partition {partition} of topic {topic!r} (partitions 0..{count - 1})")
        with self._lock:
            group = self.membership.groups.get(group_id)
            if group is not None and group.kafka_members:
                group.classic.check_commit(member_id or "", generation, group_instance_id,  # type: ignore[union-attr]
                                           self._clock())
            elif member_id:
                group, member = self.membership.member(group_id, member_id)
                if generation != group.generation:
                    raise IllegalGeneration(
                        f"generation {generation} is not the group's current generation {group.generation}; "
                        "heartbeat to get the new assignment, then commit again")
                member.last_heartbeat = self._clock()
            elif group is not None and group.members:
                raise IllegalGeneration(
                    f"group {group_id!r} has active members: commit with a member_id and the current generation")
            else:
                self.membership.groups.setdefault(group_id, Group(group_id))
            rows = [OffsetRow(group_id, t, p, o, m, generation) for t, p, o, m in offsets]
            # Queued under the lock: a rebalance after this check finds the commit in flight.
            return self.store.submit(rows)

    def commits_in_flight(self, group_id: str) -> list[Future]:
        """A group's accepted commits not yet durable. A partition's new owner reads its starting offset
        only once they are done: the old owner's last commit may be among them."""
        return self.store.in_flight(group_id)

    def _durable(self, rows: list[OffsetRow], stamp: int) -> None:
        with self._lock:
            for row in rows:
                group = self.membership.groups.get(row.group)
                if group is None:
                    continue  # forgotten meanwhile (moved to another node, deleted): its next owner reads the table
                group.committed[(row.topic, row.partition)] = CommittedOffset(row.offset, row.metadata, stamp)

    def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        with self._lock:
            return dict(self._group(group_id).committed)

    def _group(self, group_id: str) -> Group:
        group = self.membership.groups.get(group_id)
        if group is None:
            raise GroupIdNotFound(f"unknown group {group_id!r}")
        return group

    def reset_offsets(self, group_id: str, spec: str | int | None, topics: list[str] | None,
                      explicit: list[tuple[str, int, int]] | None,
                      authorize: Callable[[str], None] | None = None) -> Future:
        """Move an empty group's offsets: earliest, latest, a timestamp (ms), or explicit offsets.

        `authorize(topic)` is called for every topic touched before anything is written."""
        if explicit is not None:
            with self._lock:
                self._check_empty(self._group(group_id))
            if authorize is not None:
                for topic in sorted({t for t, _, _ in explicit}):
                    authorize(topic)
            return self.commit(group_id, None, -1, [(t, p, o, None) for t, p, o in explicit])
        if spec is None:
            raise InvalidRequest("reset to earliest, latest, a timestamp or explicit offsets")
        named = None if topics is None else [(t, None) for t in topics]
        plan = self.plan_reset(group_id, admin.ResetSpec.of(spec), named, authorize)
        return self.execute_reset(group_id, plan)

    def plan_reset(self, group_id: str, spec: admin.ResetSpec, topics: list[tuple[str, int | None]] | None,
                   authorize: Callable[[str], None] | None = None) -> list[admin.ResetTarget]:
        """Where a reset would move an empty group's offsets (Kafka's --dry-run); writes nothing.

        `topics`: (topic, partition) pairs, partition None for all of them; None: every topic with
        committed offsets. `authorize(topic)` is called for every topic touched."""
        with self._lock:
            group = self._group(group_id)
            self._check_empty(group)
            committed = dict(group.committed)
        partitions = admin.reset_partitions(lambda t: self.broker.topic(t).partitions, committed, topics)
        if authorize is not None:
            for topic in sorted({t for t, _ in partitions}):
                authorize(topic)
        return admin.plan_reset(self.broker, committed, spec, partitions)

    def execute_reset(self, group_id: str, plan: list[admin.ResetTarget]) -> Future:
        """Commit a reset plan (Kafka's --execute); the future completes once the offsets are durable."""
        with self._lock:
            self._check_empty(self._group(group_id))
        return self.commit(group_id, None, -1, [(r.topic, r.partition, r.target, None) for r in plan])

    @staticmethod
    def _check_empty(group: Group) -> None:
        members = len(group.members) + (len(group.classic.members) if group.classic is not None else 0)
        if members:
            raise NonEmptyGroup(f"group {group.group_id!r} has {members} active members; "
                                "its offsets can only be changed while it is empty")

    def delete_group(self, group_id: str) -> None:
        """Kafka's DeleteGroups: an empty group's committed offsets are removed from the table, then the
        group is forgotten. Refused with NON_EMPTY_GROUP while this coordinator has members in it."""
        with self._lock:
            self._check_empty(self._group(group_id))
        self.store.flush()
        self.store.delete_group(group_id)
        with self._lock:
            group = self.membership.groups.get(group_id)
            if group is not None and not group.members:
                del self.membership.groups[group_id]

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> dict[TopicPartition, Exception | None]:
        """Kafka's OffsetDelete: remove committed offsets of a group; per partition None, or why it is kept.
        A topic the group's active members subscribe to is refused (they would commit it again), as in
        Kafka; a group of another protocol type is refused whole while it has members (NON_EMPTY_GROUP)."""
        with self._lock:
            group = self._group(group_id)
            subscribed = admin.subscribed_topics(group)
        if subscribed is None:
            raise NonEmptyGroup(f"group {group_id!r} has members of protocol type {group.classic.protocol_type!r}; "
                                "its offsets can be deleted once it is empty")  # type: ignore[union-attr]
        refused = {tp: GroupSubscribedToTopic(f"group {group_id!r} has active members subscribed to topic {tp[0]!r}")
                   for tp in partitions if tp[0] in subscribed}
        chosen = [tp for tp in partitions if tp not in refused]
        if chosen:
            self.store.flush()  # commits accepted before the delete land before it
            self.store.delete_offsets(group_id, chosen)
            with self._lock:
                kept = self.membership.groups.get(group_id)
                for tp in chosen if kept is not None else ():
                    kept.committed.pop(tp, None)  # type: ignore[union-attr]
        return {tp: refused.get(tp) for tp in partitions}

    def lag(self, group_id: str) -> list[admin.PartitionLag]:
        """Per partition: committed offset, log end offset, lag and the member owning it on this node."""
        view = self.describe(group_id)
        owners = {tp: m.member_id for m in view.members for tp in m.assignment}
        ends = {}
        for tp in sorted(set(view.offsets) | set(owners)):
            try:
                ends[tp] = self.broker.list_offset(tp[0], tp[1], "latest")
            except UnknownTopicOrPartition:
                continue
        return admin.lag_rows(view.offsets, ends, owners)

    # ---- Kafka's classic protocol ------------------------------------------------------

    def classic_join(self, group_id: str, request: JoinRequest, new_member_id: str) -> Future:
        """JoinGroup: the future answers a JoinResult once the group's join phase completes."""
        check_group_id(group_id)
        with self._lock:
            group = self.membership.groups.setdefault(group_id, Group(group_id))
            if group.members:
                raise InconsistentGroupProtocol(
                    f"group {group_id!r} has HTTP members: a Kafka-protocol member cannot join it")
            if group.classic is None:
                group.classic = ClassicGroup(group_id, self.membership.initial_delay_s,
                                             min_session_timeout_ms=self.membership.min_session_ms,
                                             max_session_timeout_ms=self.membership.max_session_ms)
            return group.classic.join(request, self._clock(), new_member_id)

    def classic_sync(self, group_id: str, member_id: str, generation: int, group_instance_id: str | None,
                     protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes]) -> Future:
        """SyncGroup: the future answers the member's assignment once the leader's SyncGroup came."""
        with self._lock:
            return self._classic(group_id).sync(member_id, generation, group_instance_id, protocol_type,
                                                protocol_name, assignments, self._clock())

    def classic_heartbeat(self, group_id: str, member_id: str, generation: int,
                          group_instance_id: str | None) -> None:
        with self._lock:  # memory only: safe on the event loop
            self._classic(group_id).heartbeat(member_id, generation, group_instance_id, self._clock())

    def classic_leave(self, group_id: str, member_id: str, group_instance_id: str | None) -> None:
        with self._lock:
            self._classic(group_id).leave(member_id, group_instance_id, self._clock())

    def describe_classic(self, group_id: str) -> ClassicView:
        with self._lock:
            group = self._group(group_id)
            classic = group.classic
            if classic is None:
                return ClassicView(group.state, None, None, [])
            members = [ClassicMemberView(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                         m.metadata(classic.protocol_name), m.assignment)
                       for m in classic.members.values()]
            return ClassicView(classic.state, classic.protocol_type, classic.protocol_name, members)

    def _classic(self, group_id: str) -> ClassicGroup:
        group = self.membership.groups.get(group_id)
        if group is None or group.classic is None:
            raise UnknownMemberId(f"unknown group {group_id!r} (JoinGroup first)")
        return group.classic

    # ---- cluster ------------------------------------------------------------------

    def reassign(self, coordinated: Callable[[str], bool], coordinates: Callable[[str], bool],
                 released: Callable[[set[str]], bool], poll_s: float, wait_s: float) -> None:
        """The cluster moved groups between nodes (`coordinated`: this node's before, `coordinates`: now).

        Groups another node coordinates now are forgotten here (their members rejoin there), once the
        commits accepted for them are durable: the node publishes its new view only after this returns.
        A group this node takes over is served once no other node claims it any more (`released`, asked
        every `poll_s`; at most `wait_s`, after which a node still claiming it is taken to be cut off);
        then its committed offsets are read from the table, the previous coordinator's last commits
        included, so that none regresses. Until then its requests are refused with a retriable
        NOT_COORDINATOR (`taking_over`)."""
        stored = self.store.load()
        with self._lock:
            lost = [g for g in self.membership.groups if not coordinates(g)]
            for group_id in lost:
                self._forget(group_id)
            taken = {g for g in set(stored) | set(self.membership.groups) if coordinates(g) and not coordinated(g)}
            for group_id in taken:
                self._forget(group_id)  # what this node knew of it is stale
            for group_id in [g for g in self._taking_over if not coordinates(g)]:
                del self._taking_over[group_id]  # moved on before this node served it
            self._takeovers += 1
            takeover = self._takeovers
            self._taking_over.update((g, takeover) for g in taken)
            in_flight = [f for g in lost for f in self.store.in_flight(g)]
        wait(in_flight, self.broker.settings.request_timeout_ms / 1000)
        if taken:
            self._adopt_when_released(taken, takeover, released, poll_s, time.monotonic() + wait_s)

    def _adopt_when_released(self, groups: set[str], takeover: int, released: Callable[[set[str]], bool],
                             poll_s: float, deadline: float) -> None:
        def check() -> None:
            try:
                let_go = released(groups)
            except Exception:
                log.exception("whether groups taken over were released not known; asking again")
                let_go = False
            if let_go or time.monotonic() >= deadline:
                self._adopt(groups, takeover)
            else:
                self._adopt_when_released(groups, takeover, released, poll_s, deadline)

        timer = threading.Timer(poll_s, check)
        timer.daemon = True
        timer.start()

    def _adopt(self, groups: set[str], takeover: int) -> None:
        """Serve the groups of this takeover that no later view change moved away or took over again."""
        try:
            stored = self.store.load()
        except Exception:
            log.exception("offsets of groups taken over not loaded; retrying")
            threading.Timer(1.0, self._adopt, args=(groups, takeover)).start()
            return
        with self._lock:
            for group_id in [g for g in groups if self._taking_over.get(g) == takeover]:
                if group_id in stored:
                    self.membership.groups[group_id] = Group(group_id, committed=dict(stored[group_id]))
                del self._taking_over[group_id]

    def _forget(self, group_id: str) -> None:
        """Under the lock: another node coordinates the group now; Kafka members waiting here are told."""
        group = self.membership.groups.pop(group_id, None)
        if group is not None and group.classic is not None:
            group.classic.close(NotCoordinator(f"group {group_id!r} moved to another node"))

    def taking_over(self, group_id: str) -> bool:
        """Whether this node is still waiting to serve a group it takes over (see `reassign`)."""
        return group_id in self._taking_over

    # ---- description ------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted((g.group_id, g.state) for g in self.membership.groups.values())

    def describe(self, group_id: str) -> GroupView:
        now = self._clock()
        with self._lock:
            group = self._group(group_id)
            members = [
                MemberView(m.member_id, m.options.group_instance_id, sorted(m.assignment), sorted(m.revoking),
                           sorted(m.options.topics), m.options.pattern, int((now - m.last_heartbeat) * 1000))
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ]
            committed = dict(group.committed)
            owned = {tp for m in members for tp in m.assignment + m.revoking}
            generation, assignor = group.generation, group.assignor
            if group.kafka_members:
                members = _classic_members(group.classic, now)  # type: ignore[arg-type]
                owned = {tp for m in members for tp in m.assignment}
                generation, assignor = group.classic.generation, group.classic.protocol_name  # type: ignore
            view = GroupView(group_id, group.state, generation, assignor, members, committed, {})
        view.lag.update(self._lag(committed, owned))
        return view

    def _lag(self, committed: dict[TopicPartition, CommittedOffset],
             owned: set[TopicPartition]) -> dict[TopicPartition, int]:
        lag = {}
        for tp in sorted(set(committed) | owned):
            try:
                end = self.broker.topic_log(tp[0]).log_end_offset(tp[1])
                held = committed[tp].offset if tp in committed else -1  # below 0: a marker, not a position
                start = held if held >= 0 else self.broker.topic_log(tp[0]).log_start_offset(tp[1])
            except UnknownTopicOrPartition:
                continue
            lag[tp] = max(end - start, 0)
        return lag

    def group_ids(self) -> list[str]:
        with self._lock:
            return sorted(self.membership.groups)

    # ---- lifecycle --------------------------------------------------------------

    def close(self) -> None:
        """Stop the maintenance thread and write pending commits."""
        self._stop.set()
        self._reaper.join()
        self.store.close()
