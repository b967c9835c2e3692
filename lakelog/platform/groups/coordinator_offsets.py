"""The coordinator's committed offsets: commits checked and queued for `OffsetStore` (a commit answers once
durable, and the durable rows land in the groups' memory), offset resets, the deletion of a group or of
its offsets, and the committed offsets of topics deleted or created again.

Owns `Offsets`, the part of `GroupCoordinator` that owns the `OffsetStore`, and `known_group`. Any
request thread may call it; `_durable` runs on the offset store's commit thread. Group state is read and
changed under the coordinator's lock; storage I/O (the catalog, list offsets, the offsets table) runs
outside it.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Callable, Iterable

from lakelog.platform.errors import InvalidRequest, StorageUnavailable, UnknownTopicOrPartition
from lakelog.platform.groups import admin, consumer_group, offsets_topic
from lakelog.platform.groups.errors import (
    GroupIdNotFound,
    GroupSubscribedToTopic,
    IllegalGeneration,
    NonEmptyGroup,
)
from lakelog.platform.groups.membership import CONSUMER, Group, Membership, check_group_id
from lakelog.platform.groups.offsets import CommittedOffset, OffsetRow, OffsetStore
from lakelog.platform.records import TopicPartition

if TYPE_CHECKING:
    from lakelog.platform.broker.node import Broker

log = logging.getLogger(__name__)


def known_group(membership: Membership, group_id: str) -> Group:
    """The group held here, or GroupIdNotFound (the caller holds the coordinator's lock)."""
    group = membership.groups.get(group_id)
    if group is None:
        raise GroupIdNotFound(f"unknown group {group_id!r}")
    return group


class Offsets:
    """The coordinator's committed offsets, and the offsets table's store (`store`).

    Thread contract: any request thread may call it; `_durable` runs on the store's commit thread. The
    groups' state (`membership`, shared with the coordinator and its hand-over) is read and changed under
    `lock`, the coordinator's; storage I/O (the broker's catalog and list offsets, the offsets table) runs
    outside it. `_created` (the topics' creation times, last seen) is changed by `follow_topics`, called
    by the coordinator's reaper and the broker's topic deletes.
    """

    def __init__(self, broker: Broker, membership: Membership, lock: threading.RLock, clock: Callable[[], float],
                 commit_linger_ms: int, membership_current: Callable[[], bool]) -> None:
        """`broker`: the node (its topics' partitions and offsets, its storage and request timeout);
        `membership`, `lock`, `clock`: the coordinator's group state, its lock and its clock;
        `membership_current()`: whether this node's cluster membership is current (a commit appended by a
        node whose membership lapsed is refused: `OffsetStore`)."""
        self._broker = broker
        self._membership = membership
        self._lock = lock
        self._clock = clock
        self.store = OffsetStore(broker.storage, self._durable, commit_linger_ms,
                                 broker.settings.request_timeout_ms, membership_current)
        self._created: dict[str, int] = {}  # topic -> its creation time, as last seen (`follow_topics`)

    def commit(self, group_id: str, member_id: str | None, generation: int,
               offsets: list[tuple[str, int, int, str | None]], group_instance_id: str | None = None) -> Future:
        """Validate and queue a commit; the future completes once the offsets are durable.

        A group of Kafka-protocol members checks the member and generation its own way (classic.py).
        Offsets are not checked against the log: a client may store -1 or -2 (KafkaJS's resetOffsets) and
        resolve them itself; the HTTP API validates its own input."""
        check_group_id(group_id)
        for topic, partition, _, _ in offsets:
            count = offsets_topic.PARTITIONS if topic == offsets_topic.OFFSETS_TOPIC else self._broker.topic(
                topic).partitions
            if not 0 <= partition < count:
                raise UnknownTopicOrPartition(
                    f"unknown partition {partition} of topic {topic!r} (partitions 0..{count - 1})")
        with self._lock:
            group = self._membership.groups.get(group_id)
            classic = group.active_classic if group is not None else None
            if classic is not None:
                classic.check_commit(member_id or "", generation, group_instance_id, self._clock())
            elif member_id and group is not None and group.kind == CONSUMER and group.members:
                member = consumer_group.check_commit(group, member_id, generation)  # the member epoch (v9)
                member.last_heartbeat = self._clock()
            elif member_id:
                group, member = self._membership.member(group_id, member_id)
                if generation != group.generation:
                    raise IllegalGeneration(
                        f"generation {generation} is not the group's current generation {group.generation}; "
                        "heartbeat to get the new assignment, then commit again")
                member.last_heartbeat = self._clock()
            elif group is not None and group.members:
                raise IllegalGeneration(
                    f"group {group_id!r} has active members: commit with a member_id and the current generation")
            else:
                self._membership.groups.setdefault(group_id, Group(group_id))
            rows = [OffsetRow(group_id, t, p, o, m, generation) for t, p, o, m in offsets]
            # Queued under the lock: a rebalance after this check finds the commit in flight.
            return self.store.submit(rows)

    def commit_transactional(self, rows: list[OffsetRow]) -> Future:
        """A committed transaction's group offsets (TxnOffsetCommit, written when the transaction commits):
        the transaction coordinator checked its producer; no member or generation is checked, as Kafka
        checks none for them. A group not held in memory (no member since this node started) is created."""
        with self._lock:
            for row in rows:
                self._membership.groups.setdefault(row.group, Group(row.group))
            return self.store.submit(rows)

    def reload_offsets(self, group_id: str) -> None:
        """A group's committed offsets read again from the table, where another node wrote some (a
        transaction's, by its coordinator); a newer commit held here is kept."""
        loaded = self.store.load().get(group_id, {})
        with self._lock:
            group = self._membership.groups.setdefault(group_id, Group(group_id))
            for tp, committed in loaded.items():
                known = group.committed.get(tp)
                if known is None or committed.committed_ms > known.committed_ms:
                    group.committed[tp] = committed

    def commits_in_flight(self, group_id: str) -> list[Future]:
        """A group's accepted commits not yet durable. A partition's new owner reads its starting offset
        only once they are done: the old owner's last commit may be among them."""
        return self.store.in_flight(group_id)

    def _durable(self, rows: list[OffsetRow], stamp: int) -> None:
        with self._lock:
            for row in rows:
                group = self._membership.groups.get(row.group)
                if group is None:
                    continue  # forgotten meanwhile (moved to another node, deleted): its next owner reads the table
                group.committed[(row.topic, row.partition)] = CommittedOffset(row.offset, row.metadata, stamp)

    def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        with self._lock:
            return dict(known_group(self._membership, group_id).committed)

    def reset_offsets(self, group_id: str, spec: str | int | None, topics: list[str] | None,
                      explicit: list[tuple[str, int, int]] | None,
                      authorize: Callable[[str], None] | None = None) -> Future:
        """Move an empty group's offsets: earliest, latest, a timestamp (ms), or explicit offsets.

        `authorize(topic)` is called for every topic touched before anything is written."""
        if explicit is not None:
            with self._lock:
                self._check_empty(known_group(self._membership, group_id))
            if authorize is not None:
                for topic in sorted({t for t, _, _ in explicit}):
                    authorize(topic)
            return self.commit(group_id, None, -1, [(t, p, o, None) for t, p, o in explicit])
        if spec is None:
            raise InvalidRequest("reset to earliest, latest, a timestamp or explicit offsets")
        named: list[tuple[str, int | None]] | None = None if topics is None else [(t, None) for t in topics]
        plan = self.plan_reset(group_id, admin.ResetSpec.of(spec), named, authorize)
        return self.execute_reset(group_id, plan)

    def plan_reset(self, group_id: str, spec: admin.ResetSpec, topics: list[tuple[str, int | None]] | None,
                   authorize: Callable[[str], None] | None = None) -> list[admin.ResetTarget]:
        """Where a reset would move an empty group's offsets (Kafka's --dry-run); writes nothing.

        `topics`: (topic, partition) pairs, partition None for all of them; None: every topic with
        committed offsets. `authorize(topic)` is called for every topic touched."""
        with self._lock:
            group = known_group(self._membership, group_id)
            self._check_empty(group)
            committed = dict(group.committed)
        partitions = admin.reset_partitions(lambda t: self._broker.topic(t).partitions, committed, topics)
        if authorize is not None:
            for topic in sorted({t for t, _ in partitions}):
                authorize(topic)
        return admin.plan_reset(self._broker, committed, spec, partitions)

    def execute_reset(self, group_id: str, plan: list[admin.ResetTarget]) -> Future:
        """Commit a reset plan (Kafka's --execute); the future completes once the offsets are durable."""
        with self._lock:
            self._check_empty(known_group(self._membership, group_id))
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
            self._check_empty(known_group(self._membership, group_id))
        self.store.flush()
        self.store.delete_group(group_id)
        with self._lock:
            group = self._membership.groups.get(group_id)
            if group is not None and not group.members:
                del self._membership.groups[group_id]

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> dict[TopicPartition, Exception | None]:
        """Kafka's OffsetDelete: remove committed offsets of a group; per partition None, or why it is kept.
        A topic the group's active members subscribe to is refused (they would commit it again), as in
        Kafka; a group of another protocol type is refused whole while it has members (NON_EMPTY_GROUP)."""
        with self._lock:
            group = known_group(self._membership, group_id)
            subscribed = admin.subscribed_topics(group)
        if subscribed is None:
            protocol_type = group.classic.protocol_type if group.classic is not None else None
            raise NonEmptyGroup(f"group {group_id!r} has members of protocol type {protocol_type!r}; "
                                "its offsets can be deleted once it is empty")
        refused = {tp: GroupSubscribedToTopic(f"group {group_id!r} has active members subscribed to topic {tp[0]!r}")
                   for tp in partitions if tp[0] in subscribed}
        chosen = [tp for tp in partitions if tp not in refused]
        if chosen:
            self.store.flush()  # commits accepted before the delete land before it
            self.store.delete_offsets(group_id, chosen)
            with self._lock:
                kept = self._membership.groups.get(group_id)
                if kept is not None:
                    for tp in chosen:
                        kept.committed.pop(tp, None)
        return {tp: refused.get(tp) for tp in partitions}

    def forget_topic(self, topic: str) -> None:
        """A topic this node deleted: its committed offsets go, as Kafka deletes them with the topic, from
        the table (the commits accepted before it written first) and from the groups held here; a new topic of
        the name starts without them. Other nodes drop theirs from memory with their next catalog refresh
        (`follow_topics`). A commit for it after this is refused: the topic is unknown."""
        self.store.flush()
        try:
            self.store.delete_topic(topic)
        except StorageUnavailable as exc:
            log.warning("topic %s is deleted, but its committed offsets are still in the offsets table: %s "
                        "(DeleteGroups or OffsetDelete removes them)", topic, exc)
        self.follow_topics({t: c for t, c in self._created.items() if t != topic}, {topic})

    def follow_topics(self, created: dict[str, int], gone: Iterable[str] = ()) -> None:
        """The catalog's topics now (name -> creation time): the committed offsets of a topic deleted since
        the last look (or in `gone`) leave the groups held here; those of a topic deleted and created again
        are read again from the table, which holds the new topic's only (storage I/O: never under the lock)."""
        seen, self._created = self._created, created
        changed = set(gone) | {t for t, at in seen.items() if created.get(t) != at}
        if not changed:
            return
        again = {t for t in changed if t in created}
        reloaded = self.store.load() if again else {}
        with self._lock:
            for group in self._membership.groups.values():
                for tp in [tp for tp in group.committed if tp[0] in changed]:
                    del group.committed[tp]
                group.committed.update({tp: c for tp, c in reloaded.get(group.group_id, {}).items() if tp[0] in again})
