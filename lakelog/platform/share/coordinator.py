"""The share coordinator (KIP-932): share groups' membership and their share-partitions, one per node.

What Kafka spreads over three roles (the group coordinator for membership, each partition's leader for the
in-flight records, the share coordinator for their durability) is one object here, over one lock: the node
that serves a share group holds its share-partitions, and their state is durable in `_control/share_state`
(`state_store.py`) before any answer that depends on it. A node that starts, after a crash too, loads that
state: records that were acquired come back with the delivery count they had.

Deliveries: a fetch applies the member's acknowledgements, reads each assigned partition's log from the first
record that may be delivered (`SharePartition.read_from`), acquires what is available there, makes the result
durable and answers the records with their acquired ranges. A fetch that acquires nothing waits for new
records up to its max wait. A reaper thread expires members and acquisition locks.

Kafka clients reach it through `kafka_api/handlers/share_groups.py`, HTTP clients through
`ingest_api/routes/share_groups.py`; both translate, the logic is here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from lakelog.platform.broker.node import Broker
from lakelog.platform.errors import LakelogError, OffsetOutOfRange, UnknownTopicOrPartition
from lakelog.platform.groups.errors import GroupIdNotFound, UnknownMemberId
from lakelog.platform.groups.membership import check_group_id
from lakelog.platform.records import FetchResult, TopicPartition
from lakelog.platform.share import config as share_config
from lakelog.platform.share import dead_letters
from lakelog.platform.share.calls import Ack, Delivery, HeartbeatAnswer, only_acquired
from lakelog.platform.share.errors import GroupNotEmpty, InvalidRecordState
from lakelog.platform.share.group import ShareGroup, ShareMember
from lakelog.platform.share.holdings import Holdings
from lakelog.platform.share.partition import Archived, SharePartition
from lakelog.platform.share.state_store import Key, ShareStateStore
from lakelog.settings import GroupSettings

log = logging.getLogger(__name__)

REAP_INTERVAL_S = 0.5
LEAVE_GRACE_S = 1.0  # a member that left may still acknowledge this long (its acks raced its leave heartbeat)


@dataclass
class _Changes:
    """What a step changed under the lock, done outside it: states to save, records to dead-letter."""

    states: dict[Key, SharePartition | None] = field(default_factory=dict)
    archived: dict[Key, list[Archived]] = field(default_factory=dict)
    freed: bool = False  # records acknowledged or released: a fetch waiting for records may find some now

    def note(self, key: Key, state: SharePartition, freed: bool = False) -> None:
        self.states[key] = state
        self.freed = self.freed or freed
        gone = state.take_archived()
        if gone:
            self.archived.setdefault(key, []).extend(gone)


class ShareCoordinator:
    def __init__(self, broker: Broker, settings: GroupSettings, store: ShareStateStore | None = None,
                 reap: bool = True, owns: Callable[[str], bool] = lambda group_id: True) -> None:
        self.broker = broker
        self.settings = settings
        self.store = store or ShareStateStore(broker.storage, broker.settings.request_timeout_ms)
        self._lock = threading.RLock()
        self.groups: dict[str, ShareGroup] = {}
        self._leaving: dict[tuple[str, str], float] = {}  # members that left: when their records go back
        self.partitions, self.configs = self.store.load()  # for listing; each group is read again when used
        self.holdings = Holdings(owns)
        for group_id, _, _ in self.partitions:
            self.groups.setdefault(group_id, ShareGroup(group_id))
        for group_id in self.configs:
            self.groups.setdefault(group_id, ShareGroup(group_id))
        self._closed = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="share-reaper", daemon=True)
        if reap:
            self._reaper.start()

    def _take(self, group_id: str) -> None:
        """The group's latest state from the table, when it comes to this node (see holdings.py)."""
        if self.holdings.held(group_id):
            return
        partitions, configs = self.store.load(group_id)
        with self._lock:
            if self.holdings.held(group_id):
                return
            for key in [k for k in self.partitions if k[0] == group_id]:
                del self.partitions[key]
            self.partitions.update(partitions)
            self.configs.pop(group_id, None)
            self.configs.update(configs)
            self.groups.setdefault(group_id, ShareGroup(group_id))
            self.holdings.hold(group_id)

    def _drop(self, group_id: str) -> None:
        """Forget a group another node serves now (its members join there)."""
        for key in [k for k in self.partitions if k[0] == group_id]:
            del self.partitions[key]
        self.groups.pop(group_id, None)
        self.configs.pop(group_id, None)
        log.info("share group %r: served by another node now", group_id)

    # ---- membership ---------------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, epoch: int, topics: Sequence[str] | None,
                  client: tuple[str, str] = ("", "")) -> HeartbeatAnswer:
        check_group_id(group_id)
        self._take(group_id)
        changes = _Changes()
        with self._lock:
            group = self.groups.setdefault(group_id, ShareGroup(group_id))
            subscription = None if topics is None else tuple(sorted(set(topics)))
            member = group.heartbeat(member_id, epoch, subscription, time.monotonic(), self._counts, client)
            if member is None:  # its records go back once its last acknowledgements had time to land
                self._leaving[(group_id, member_id)] = time.monotonic() + LEAVE_GRACE_S
                answer = HeartbeatAnswer(member_id, -1, None)
            else:
                answer = HeartbeatAnswer(member.member_id, member.epoch, self._news(member))
        self._apply(group_id, changes, wait_durable=False)
        return answer

    def members(self, group_id: str) -> list[ShareMember]:
        with self._lock:
            group = self.groups.get(group_id)
            return list(group.members.values()) if group else []

    def _news(self, member: ShareMember) -> frozenset[TopicPartition] | None:
        if member.sent == member.assignment:
            return None
        member.sent = member.assignment
        return member.assignment

    def _counts(self, topics: set[str]) -> dict[str, int]:
        counts = {}
        for topic in topics:
            try:
                counts[topic] = self.broker.topic(topic).partitions
            except LakelogError:
                continue  # not created yet: assigned once it is
        return counts

    # ---- deliveries and acknowledgements ------------------------------------------------------------

    def acknowledge(self, group_id: str, member_id: str, acks: Sequence[Ack]) -> dict[TopicPartition, LakelogError]:
        """Apply acknowledgements; answers once they are durable, with the partitions whose acknowledgement
        failed (the other batches of the call still apply)."""
        if not acks:
            return {}
        self._take(group_id)
        changes = _Changes()
        with self._lock:
            self._member(group_id, member_id, acknowledging=True)
            failed = self._acknowledge(group_id, member_id, acks, changes)
        self._apply(group_id, changes)
        return failed

    def fetch(self, group_id: str, member_id: str, partitions: Sequence[TopicPartition], acks: Sequence[Ack] = (),
              max_records: int = 500, max_wait_ms: int = 0, max_bytes: int | None = None
              ) -> tuple[dict[TopicPartition, LakelogError], dict[TopicPartition, Delivery]]:
        """Acknowledge, then deliver up to `max_records` records of `partitions` to the member, waiting up to
        `max_wait_ms` for some. Answers (failed acknowledgements, each partition's delivery)."""
        deadline = time.monotonic() + max(max_wait_ms, 0) / 1000
        self._take(group_id)
        changes = _Changes()
        with self._lock:
            self._member(group_id, member_id, acknowledging=True)
            failed = self._acknowledge(group_id, member_id, acks, changes)
        while True:
            deliveries = self._deliver(group_id, member_id, partitions, max_records, max_bytes, changes)
            self._apply(group_id, changes)  # the acknowledgements and the deliveries: one save
            changes = _Changes()
            remaining = deadline - time.monotonic()
            if any(d.acquired or d.error for d in deliveries.values()) or remaining <= 0 or not partitions:
                return failed, deliveries
            self.broker.wait_for_commit(min(remaining, self.broker.settings.refresh_interval_ms / 1000))

    def release(self, group_id: str, member_id: str) -> None:
        """Give back to the group every record the member holds (it closed its share session)."""
        changes = _Changes()
        with self._lock:
            self._release(group_id, member_id, changes)
        self._apply(group_id, changes)

    def _member(self, group_id: str, member_id: str, acknowledging: bool = False) -> None:
        """Raise UnknownMemberId unless the member is in the group (or, for its acknowledgements, just left it:
        a client's last ShareAcknowledge and its leave heartbeat travel on two connections)."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group else None
        if member is not None:
            member.last_seen = time.monotonic()
        elif not (acknowledging and (group_id, member_id) in self._leaving):
            raise UnknownMemberId(f"member {member_id!r} is not in share group {group_id!r}: join first")

    def _acknowledge(self, group_id: str, member_id: str, acks: Sequence[Ack],
                     changes: _Changes) -> dict[TopicPartition, LakelogError]:
        failed: dict[TopicPartition, LakelogError] = {}
        limit = self.config(group_id).delivery_limit
        for ack in acks:
            key = (group_id, ack.topic, ack.partition)
            state = self.partitions.get(key)
            try:
                if state is None:
                    raise InvalidRecordState(f"share group {group_id!r} holds nothing of {ack.topic}-{ack.partition}")
                state.acknowledge(member_id, ack.first, ack.last, ack.types, limit)
            except (InvalidRecordState, ValueError) as exc:
                failed[(ack.topic, ack.partition)] = exc if isinstance(exc, LakelogError) else InvalidRecordState(
                    str(exc))
                continue
            changes.note(key, state, freed=True)
        return failed

    def _deliver(self, group_id: str, member_id: str, partitions: Sequence[TopicPartition], max_records: int,
                 max_bytes: int | None, changes: _Changes) -> dict[TopicPartition, Delivery]:
        """Acquire records of `partitions` for the member; the states changed are noted in `changes`, for the
        caller to save before it answers."""
        settings = self.config(group_id)
        deliveries: dict[TopicPartition, Delivery] = {}
        budget = max_records
        for topic, partition in partitions:
            key = (group_id, topic, partition)
            if budget <= 0:
                deliveries[(topic, partition)] = Delivery()
                continue
            try:
                state = self._state(key, settings)
                with self._lock:
                    start = state.read_from()
                fetched = self._read(state, topic, partition, start, budget, max_bytes)
            except LakelogError as exc:
                deliveries[(topic, partition)] = Delivery(error=exc)
                continue
            offsets = fetched.records.column("offset").to_pylist()
            read_to = fetched.next_offset or start
            with self._lock:
                group = self.groups.get(group_id)
                if group is None or member_id not in group.members:  # it left, or its session ended: nothing
                    deliveries[(topic, partition)] = Delivery()  # more for it (its acknowledgements still count)
                    continue
                window = (state.start_offset, state.next_offset)
                acquired = state.acquire(member_id, offsets, read_to, int(time.time() * 1000), settings.lock_ms,
                                         budget, self.settings.group_share_partition_max_record_locks)
                if acquired or window != (state.start_offset, state.next_offset):
                    changes.note(key, state)
            budget -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
            deliveries[(topic, partition)] = Delivery(only_acquired(fetched.records, acquired), acquired)
        return deliveries

    def _read(self, state: SharePartition, topic: str, partition: int, start: int, budget: int,
              max_bytes: int | None) -> FetchResult:
        try:
            return self.broker.fetch(topic, partition, start, max_records=budget, max_bytes=max_bytes)
        except OffsetOutOfRange as exc:  # retention or DeleteRecords moved the log start past the window
            with self._lock:
                state.move_start(exc.log_start_offset)
                start = state.read_from()
            return self.broker.fetch(topic, partition, start, max_records=budget, max_bytes=max_bytes)

    def _state(self, key: Key, settings: share_config.ShareConfig) -> SharePartition:
        """The share-partition, made at `share.auto.offset.reset` on first use."""
        with self._lock:
            state = self.partitions.get(key)
        if state is not None:
            return state
        _, topic, partition = key
        if partition < 0 or partition >= self.broker.topic(topic).partitions:
            raise UnknownTopicOrPartition(f"{topic} has no partition {partition}")
        reset = settings.auto_offset_reset
        spec: str | int = reset if reset in ("latest", "earliest") else (
            int(time.time() * 1000) - share_config.duration_ms(reset))
        offset = self.broker.list_offset(topic, partition, spec)
        if offset < 0:
            offset = self.broker.list_offset(topic, partition, "latest")
        with self._lock:
            return self.partitions.setdefault(key, SharePartition(offset, offset))

    # ---- configs ------------------------------------------------------------------------------------

    def config(self, group_id: str) -> share_config.ShareConfig:
        with self._lock:
            return share_config.resolve(self.settings, self.configs.get(group_id, {}))

    def set_configs(self, group_id: str, changes: dict[str, str | None]) -> None:
        """Set (None: remove) group configs, checked first: nothing changes when one is refused."""
        check_group_id(group_id)
        for name, value in changes.items():
            share_config.check(name, value)
        self._take(group_id)
        with self._lock:
            current = dict(self.configs.get(group_id, {}))
            for name, value in changes.items():
                if value is None:
                    current.pop(name, None)
                else:
                    current[name] = value
            self.configs[group_id] = current
            self.groups.setdefault(group_id, ShareGroup(group_id))
            future = self.store.save_configs(group_id, current)
        future.result()

    # ---- administration -----------------------------------------------------------------------------

    def group_ids(self) -> list[str]:
        with self._lock:
            return sorted(self.groups)

    def group(self, group_id: str) -> ShareGroup:
        self._take(group_id)
        with self._lock:
            group = self.groups.get(group_id)
            if group is None:
                raise GroupIdNotFound(f"share group {group_id!r} does not exist")
            return group

    def start_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """Each share-partition's start offset: every record before it is accepted or archived."""
        self._take(group_id)
        with self._lock:
            return {(t, p): s.start_offset for (g, t, p), s in self.partitions.items() if g == group_id}

    def in_flight(self, group_id: str) -> dict[TopicPartition, SharePartition]:
        self._take(group_id)
        with self._lock:
            return {(t, p): s for (g, t, p), s in self.partitions.items() if g == group_id}

    def alter_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Start the share-partitions over at these offsets (the group must have no members)."""
        self._take(group_id)
        changes = _Changes()
        with self._lock:
            self._check_empty(group_id, "alter its offsets")
            for (topic, partition), offset in offsets.items():
                key = (group_id, topic, partition)
                state = self.partitions.setdefault(key, SharePartition(offset, offset))
                state.reset(offset)
                changes.note(key, state)
        self._apply(group_id, changes)

    def delete_offsets(self, group_id: str, topics: Sequence[str]) -> None:
        """Forget the group's share-partitions of these topics (the group must have no members)."""
        self._take(group_id)
        changes = _Changes()
        with self._lock:
            self._check_empty(group_id, "delete its offsets")
            for key in [k for k in self.partitions if k[0] == group_id and k[1] in topics]:
                del self.partitions[key]
                changes.states[key] = None
        self._apply(group_id, changes)

    def delete_group(self, group_id: str) -> None:
        self._take(group_id)
        with self._lock:
            self._check_empty(group_id, "delete it")
            for key in [k for k in self.partitions if k[0] == group_id]:
                del self.partitions[key]
            self.configs.pop(group_id, None)
            del self.groups[group_id]
        self.store.flush()
        self.store.delete_group(group_id)

    def _check_empty(self, group_id: str, what: str) -> None:
        group = self.group(group_id)
        if group.members:
            raise GroupNotEmpty(f"share group {group_id!r} has {len(group.members)} member(s): stop them to {what}")

    # ---- the reaper ---------------------------------------------------------------------------------

    def tick(self) -> None:
        """Remove silent members (their records back to the group) and expire acquisition locks."""
        now, wall_ms = time.monotonic(), int(time.time() * 1000)
        timeout_s = self.settings.group_share_session_timeout_ms / 1000
        touched: dict[str, _Changes] = {}
        gone = self.holdings.gone(list(self.groups))
        with self._lock:
            for group_id in gone:
                self._drop(group_id)
            for (group_id, member_id), at in list(self._leaving.items()):
                if at <= now:
                    del self._leaving[(group_id, member_id)]
                    self._release(group_id, member_id, touched.setdefault(group_id, _Changes()))
            for group_id, group in self.groups.items():
                for member_id in group.expire(now, timeout_s, self._counts):
                    log.info("share group %r: member %s left (session timed out)", group_id, member_id)
                    self._release(group_id, member_id, touched.setdefault(group_id, _Changes()))
            for key, state in self.partitions.items():
                limit = share_config.resolve(self.settings, self.configs.get(key[0], {})).delivery_limit
                if state.expire(wall_ms, limit):
                    touched.setdefault(key[0], _Changes()).note(key, state, freed=True)
        for group_id, changes in touched.items():
            self._apply(group_id, changes, wait_durable=False)

    def _reap_loop(self) -> None:
        while not self._closed.wait(REAP_INTERVAL_S):
            try:
                self.tick()
            except Exception:  # never let the reaper die
                log.exception("share coordinator: reaping failed")

    def _release(self, group_id: str, member_id: str, changes: _Changes) -> None:
        limit = share_config.resolve(self.settings, self.configs.get(group_id, {})).delivery_limit
        for key, state in self.partitions.items():
            if key[0] == group_id and state.release_member(member_id, limit):
                changes.note(key, state, freed=True)

    def _apply(self, group_id: str, changes: _Changes, wait_durable: bool = True) -> Future | None:
        """Dead-letter what was archived, then save the changed states (and wait until they are durable, or
        answer the save's future)."""
        if not changes.states:
            return None
        target = self.config(group_id).dead_letter_topic
        for (_, topic, partition), archived in changes.archived.items():
            to = dead_letters.dead_letter_topic(self.broker, target, topic)
            try:
                dead_letters.write(self.broker, group_id, topic, partition, archived, to)
            except LakelogError as exc:
                log.error("share group %r: could not dead-letter %d record(s) of %s-%d to %r: %s", group_id,
                          len(archived), topic, partition, to, exc)
        with self._lock:
            future = self.store.save(changes.states)
        if changes.freed:  # wake the fetches waiting for records (they wait on the node's table commits)
            future.add_done_callback(lambda _: self._wake())
        if wait_durable:
            future.result()
        return future

    def _wake(self) -> None:
        with self.broker.committed:
            self.broker.committed.notify_all()

    def close(self) -> None:
        self._closed.set()
        if self._reaper.is_alive():
            self._reaper.join(timeout=5)
        self.store.close()

    def flush(self) -> None:
        self.store.flush()
