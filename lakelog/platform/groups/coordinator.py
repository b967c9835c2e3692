"""The consumer-group coordinator: the lock, the background reaper and all I/O around the membership
state machine (`membership.py`) and consumer positions (`positions.py`).

Members join, heartbeat, poll, commit and leave through calls on this class (the HTTP tier
translates). Storage I/O — the catalog's partition counts, fetches, offset lookups — runs outside the
lock, so a slow store never stalls a heartbeat. A background thread expires members whose session
(`session.timeout.ms`) or poll interval (`max.poll.interval.ms`) passed, runs delayed first
assignments and follows topics that appear or grow.

Committed offsets go to `_control/consumer_offsets` through `OffsetStore`; a commit returns once
durable, and a new coordinator reloads them. KIP-848 groups' members go to `_control/consumer_groups`.

The class is built from collaborators, each given what it needs: this module owns the lock, the reaper
thread, the HTTP members' membership and polls, the Kafka classic protocol's calls, descriptions, lag and
the lifecycle; `coordinator_offsets.py` (`Offsets`, held as `offsets`) the commits and their durability
through the offset store, resets and deletes; `coordinator_consumer.py` (`ConsumerGroups`, `consumers`)
KIP-848 groups' heartbeats and durable state; `coordinator_handover.py` (`Handover`, held as `handover`)
the groups handed over between the nodes of a cluster; `coordinator_views.py` what it answers with. The
group state (`membership`) is shared by all, under the coordinator's `_lock`, which each part is given.
Any request thread (HTTP, the Kafka listener's workers, the CLI) may call it; the reaper calls `tick`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import Future, wait
from typing import Callable, Iterable

from lakelog.platform.broker.node import Broker
from lakelog.platform.cluster.errors import NotInCluster
from lakelog.platform.cluster.relay import at_least
from lakelog.platform.errors import InvalidRequest, UnknownTopicOrPartition
from lakelog.platform.groups import admin, consumer_group, positions
from lakelog.platform.groups.classic import ClassicGroup, JoinRequest
from lakelog.platform.groups.coordinator_consumer import ConsumerGroups
from lakelog.platform.groups.coordinator_handover import Handover
from lakelog.platform.groups.coordinator_offsets import Offsets, known_group
from lakelog.platform.groups.coordinator_views import (
    ClassicMemberView,
    ClassicView,
    GroupView,
    MemberView,
    Poll,
    classic_members,
)
from lakelog.platform.groups.errors import InconsistentGroupProtocol, UnknownMemberId
from lakelog.platform.groups.membership import (
    Group,
    Heartbeat,
    JoinOptions,
    Membership,
    PartitionCounts,
    check_group_id,
)
from lakelog.platform.groups.offsets import CommittedOffset, OffsetRow, OffsetStore
from lakelog.platform.records import TopicPartition

__all__ = ["ClassicMemberView", "ClassicView", "GroupCoordinator", "GroupView", "MemberView", "Poll"]

log = logging.getLogger(__name__)

METADATA_CHECK_S = 1.0
REAP_INTERVAL_S = 0.05


class GroupCoordinator:
    """The consumer groups this node coordinates. Any request thread may call it; its reaper calls `tick`.
    `_lock` guards the group state (`membership`), which its parts (`offsets`, `handover`) are given with
    it; `_counts` and `_counts_at` (the catalog's partition counts) are read and set outside it."""

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
        self._lock = threading.RLock()  # guards `membership`, here and in the parts
        self.membership = Membership(initial_rebalance_delay_ms, min_session_timeout_ms, max_session_timeout_ms)
        self._counts: dict[str, int] = {}
        self._counts_at = -1e9
        self.offsets = Offsets(broker, self.membership, self._lock, clock, commit_linger_ms,
                               self._membership_current)
        broker.topic_deleted.append(self.offsets.forget_topic)  # a deleted topic's offsets go with it, as in Kafka
        for group_id, offsets in self.store.load().items():
            self.membership.groups[group_id] = Group(group_id, committed=offsets)
        self.consumers = ConsumerGroups(broker.storage, self.membership, self._lock, clock, commit_linger_ms,
                                        broker.settings.request_timeout_ms, self._membership_current)
        self.consumers.restore(self.consumers.load())  # KIP-848 groups' members, where they were
        self.handover = Handover(self.membership, self._lock, self.store, broker.settings.request_timeout_ms,
                                 self.consumers)
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="group-reaper", daemon=True)
        self._reaper.start()

    @property
    def rebalances(self) -> int:
        return self.membership.rebalances

    @property
    def store(self) -> OffsetStore:
        """The committed offsets' store (`_control/consumer_offsets`), the offsets part's."""
        return self.offsets.store

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

    def _membership_current(self) -> bool:
        """Whether this node's cluster membership is current (not lapsed: a paused node's groups may have
        moved on); always, outside a cluster."""
        if self.broker.cluster is not None:
            try:
                self.broker.cluster.view()
            except NotInCluster:
                return False
        return True

    def _partition_counts(self, max_age_s: float = 0.0) -> PartitionCounts:
        """topic -> partitions from the catalog (storage I/O: never called under the lock)."""
        if self._clock() - self._counts_at > max_age_s:
            topics = self.broker.list_topics()
            self._counts = {t.name: t.partitions for t in topics}
            self._counts_at = self._clock()
            self.offsets.follow_topics({t.name: t.created_ms for t in topics})
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
            self.consumers.persist_changed()

    # ---- polling --------------------------------------------------------------

    def poll(self, group_id: str, member_id: str, max_records: int = 500, max_bytes: int | None = None,
             timeout_ms: int = 0, authorize: Callable[[str], None] | None = None, after: int | None = None,
             request: int | None = None) -> Poll:
        """Records from the member's partitions, fairly (see positions.py); waits up to `timeout_ms` for a
        commit when there is nothing to read.

        `after`: the number of the last poll the member received; if the one after it was lost on its way,
        its records come again (`positions.acknowledge`). Without it, every answer counts as received.
        `request`: the member's number for this request (higher each time); a stale one (it came after a later
        one) answers nothing and changes nothing (`positions.start`).

        `authorize(topic)` raises when the caller may no longer read a topic: checked on every poll,
        since a right revoked after the join must stop the records at once."""
        if max_records < 1:
            raise InvalidRequest(f"max_records must be >= 1, got {max_records}")
        deadline = self._clock() + max(timeout_ms, 0) / 1000
        with self._lock:  # before the auto-commit: a lost answer's records are not committed past
            group, member = self.membership.member(group_id, member_id)
            if not positions.current(member, request):  # the member sent a later one: this answer goes nowhere
                return Poll(group.generation, [], after or 0)
            started = positions.start(member, after)
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
                    if after is not None and positions.overtaken(member, started):
                        return Poll(generation, [], after)  # another poll answered meanwhile: change nothing
                    return Poll(generation, positions.advance(member, results, after, started), member.polls)
            remaining = deadline - self._clock()
            if remaining <= 0:
                with self._lock:
                    _, member = self.membership.member(group_id, member_id)
                    # Another poll of the member may have answered meanwhile (into a closed connection, or
                    # this one is the abandoned one): this answer must not carry its number, or the member
                    # would acknowledge records it never got; nor may it roll that answer back, which the
                    # member may have received. Its next poll's `after` settles which (`acknowledge`).
                    if after is not None and positions.overtaken(member, started):
                        return Poll(generation, [], after)
                    positions.advance(member, [], after, started)  # counts the answer; rewinds if after != polls
                    return Poll(generation, [], member.polls)
            self.broker.wait_for_commit(min(remaining, wait_s))

    def _poll_plan(self, group_id: str, member_id: str) -> tuple[int, positions.Plan]:
        with self._lock:
            _, member = self.membership.member(group_id, member_id)
            starting = any(tp not in member.positions for tp in member.assignment)
        if starting:
            wait(self.offsets.commits_in_flight(group_id), self.broker.settings.request_timeout_ms / 1000)
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
        found = positions.initial_positions(self.broker, committed, reset)
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

    # ---- Kafka's classic protocol ------------------------------------------------------

    def classic_join(self, group_id: str, request: JoinRequest, new_member_id: str) -> Future:
        """JoinGroup: the future answers a JoinResult once the group's join phase completes."""
        check_group_id(group_id)
        with self._lock:
            group = self.membership.groups.setdefault(group_id, Group(group_id))
            if group.members:
                log.warning("a classic member asked to join group %s of %s members", group_id, group.kind)
                raise InconsistentGroupProtocol(
                    f"group {group_id!r} has {group.kind} members: a classic Kafka-protocol member cannot join it")
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
            group = known_group(self.membership, group_id)
            classic = group.classic
            if group.group_type == "consumer":  # KIP-848's: its members are ConsumerGroupDescribe's
                return ClassicView(group.state, "consumer", consumer_group.kafka_assignor(group.assignor), [])
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

    # ---- KIP-848's consumer protocol (`consumer_group.py`) -------------------------------

    def consumer_heartbeat(self, group_id: str, request: consumer_group.ConsumerHeartbeat
                           ) -> consumer_group.ConsumerAnswer:
        """ConsumerGroupHeartbeat (blocking: a join reads the catalog's partition counts, a change is written)."""
        counts = self._partition_counts(0.0 if request.member_epoch == consumer_group.JOIN else METADATA_CHECK_S)
        return self.consumers.heartbeat(group_id, request, counts)

    # ---- description ------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted((g.group_id, g.state) for g in self.membership.groups.values())

    def group_types(self) -> dict[str, str]:
        """Each group's Kafka type: "consumer" (KIP-848) or "classic" (classic and HTTP groups)."""
        with self._lock:
            return {g.group_id: g.group_type for g in self.membership.groups.values()}

    def describe(self, group_id: str) -> GroupView:
        now = self._clock()
        with self._lock:
            group = known_group(self.membership, group_id)
            members = [
                MemberView(m.member_id, m.options.group_instance_id, sorted(m.assignment), sorted(m.revoking),
                           sorted(m.options.topics), m.options.pattern, int((now - m.last_heartbeat) * 1000),
                           m.epoch)
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ]
            committed = dict(group.committed)
            owned = {tp for m in members for tp in m.assignment + m.revoking}
            generation, assignor = group.generation, group.assignor
            classic = group.active_classic
            if classic is not None:
                members = classic_members(classic, now)
                owned = {tp for m in members for tp in m.assignment}
                generation, assignor = classic.generation, classic.protocol_name
            view = GroupView(group_id, group.state, generation, assignor, members, committed, {}, group.group_type)
        view.lag.update(self._lag(committed, owned))
        return view

    def _lag(self, committed: dict[TopicPartition, CommittedOffset],
             owned: set[TopicPartition]) -> dict[TopicPartition, int]:
        lag: dict[TopicPartition, int] = {}
        ends: dict[str, list[int]] = {}  # per topic: past the journal's records, the leader's (relay.py)
        for tp in sorted(set(committed) | owned):
            try:
                if tp[0] not in ends:
                    ends[tp[0]] = self.broker.log_end_offsets(tp[0])
                end = at_least(ends[tp[0]], tp[1], self.broker.topic_log(tp[0]).log_end_offset(tp[1]))
                held = committed[tp].offset if tp in committed else -1  # below 0: a marker, not a position
                start = held if held >= 0 else self.broker.topic_log(tp[0]).log_start_offset(tp[1])
            except UnknownTopicOrPartition:
                continue
            lag[tp] = max(end - start, 0)
        return lag

    def group_ids(self) -> list[str]:
        with self._lock:
            return sorted(self.membership.groups)

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

    # ---- committed offsets (`Offsets`) ----------------------------------------------------

    def commit(self, group_id: str, member_id: str | None, generation: int,
               offsets: list[tuple[str, int, int, str | None]], group_instance_id: str | None = None) -> Future:
        return self.offsets.commit(group_id, member_id, generation, offsets, group_instance_id)

    def commit_transactional(self, rows: list[OffsetRow]) -> Future:
        return self.offsets.commit_transactional(rows)

    def reload_offsets(self, group_id: str) -> None:
        self.offsets.reload_offsets(group_id)

    def commits_in_flight(self, group_id: str) -> list[Future]:
        return self.offsets.commits_in_flight(group_id)

    def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return self.offsets.committed(group_id)

    def reset_offsets(self, group_id: str, spec: str | int | None, topics: list[str] | None,
                      explicit: list[tuple[str, int, int]] | None,
                      authorize: Callable[[str], None] | None = None) -> Future:
        return self.offsets.reset_offsets(group_id, spec, topics, explicit, authorize)

    def plan_reset(self, group_id: str, spec: admin.ResetSpec, topics: list[tuple[str, int | None]] | None,
                   authorize: Callable[[str], None] | None = None) -> list[admin.ResetTarget]:
        return self.offsets.plan_reset(group_id, spec, topics, authorize)

    def execute_reset(self, group_id: str, plan: list[admin.ResetTarget]) -> Future:
        return self.offsets.execute_reset(group_id, plan)

    def delete_group(self, group_id: str) -> None:
        self.offsets.delete_group(group_id)

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> dict[TopicPartition, Exception | None]:
        return self.offsets.delete_offsets(group_id, partitions)

    def forget_topic(self, topic: str) -> None:
        self.offsets.forget_topic(topic)

    def follow_topics(self, created: dict[str, int], gone: Iterable[str] = ()) -> None:
        self.offsets.follow_topics(created, gone)

    # ---- hand-over between nodes (`Handover`) ---------------------------------------------

    def reassign(self, coordinated: Callable[[str], bool], coordinates: Callable[[str], bool],
                 released: Callable[[set[str]], bool], poll_s: float, wait_s: float) -> None:
        self.handover.reassign(coordinated, coordinates, released, poll_s, wait_s)

    def taking_over(self, group_id: str) -> bool:
        return self.handover.taking_over(group_id)

    # ---- lifecycle --------------------------------------------------------------

    def close(self) -> None:
        """Stop the maintenance thread and write pending commits."""
        self._stop.set()
        self._reaper.join()
        self.store.close()
        self.consumers.close()
