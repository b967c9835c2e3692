"""The coordinator's KIP-848 consumer groups (`consumer_group.py`) made durable: a heartbeat that changed a
group's state is answered once that state is in `_control/consumer_groups` (`consumer_store.py`), changes the
reaper makes (expiries, fenced members, topics that grew) are written behind it, and the groups' members are
restored from the table when the node starts or takes a group over (`coordinator_handover.py`): they go on
with their epochs and assignments, without joining again.

Owns `ConsumerGroups`, the part of `GroupCoordinator` that owns the `ConsumerGroupStore`. Any request thread
may call `heartbeat`; the reaper calls `persist_changed`, the hand-over `load` and `restore`. Group state is
read and changed under the coordinator's lock; the table's reads and the wait for a write run outside it.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import Callable

from lakelog.platform.groups import consumer_group
from lakelog.platform.groups.consumer_store import ConsumerGroupStore, has_members, restore, snapshot
from lakelog.platform.groups.membership import CONSUMER, Group, Membership, PartitionCounts
from lakelog.platform.storage import Storage

log = logging.getLogger("lakelog.platform.groups.coordinator")  # the coordinator's one logger, whichever part logs


class ConsumerGroups:
    """KIP-848 groups' heartbeats and their durable state.

    Thread contract: any request thread may call `heartbeat`, `load` (storage I/O, never under the lock);
    `persist_changed` and `restore` are called with `lock` (the coordinator's) held. `_written` (each
    group's generation and state last submitted) is read and changed under it."""

    def __init__(self, storage: Storage, membership: Membership, lock: threading.RLock, clock: Callable[[], float],
                 linger_ms: int, timeout_ms: int, membership_current: Callable[[], bool]) -> None:
        self._membership = membership
        self._lock = lock
        self._clock = clock
        self._timeout_s = timeout_ms / 1000
        self.store = ConsumerGroupStore(storage, linger_ms, timeout_ms, membership_current)
        self._written: dict[str, tuple[int, str]] = {}  # group -> its generation and state last submitted

    def heartbeat(self, group_id: str, request: consumer_group.ConsumerHeartbeat,
                  counts: PartitionCounts) -> consumer_group.ConsumerAnswer:
        """ConsumerGroupHeartbeat, answered once the state it changed is durable. A write that failed is
        logged, and the answer given: a coordinator that reads an older state fences the member by its epoch
        (it joins again), never serves it stale partitions."""
        with self._lock:
            answer = consumer_group.heartbeat(self._membership, group_id, request, self._clock(), counts)
            written = self._persist(group_id)
        if written is not None:
            try:
                written.result(self._timeout_s)
            except Exception as exc:
                log.warning("state of consumer group %s not written: %s", group_id, exc)
        return answer

    def persist_changed(self) -> None:
        """Under the lock (the reaper, after a tick): write the consumer groups whose state changed. What a
        tick changes (a member removed, an assignment computed) always moves the group's generation; a group
        whose generation did not move since its last write is not encoded again."""
        for group_id, group in self._membership.groups.items():
            if group.kind == CONSUMER and self._written.get(group_id, (None, ""))[0] != group.generation:
                self._persist(group_id)
        for gone in [g for g in self._written if g not in self._membership.groups]:
            del self._written[gone]  # moved to another node: its state there is that node's to write

    def _persist(self, group_id: str) -> Future | None:
        group = self._membership.groups.get(group_id)
        if group is None or group.kind != CONSUMER:
            return None
        state = snapshot(group)
        if self._written.get(group_id, (None, ""))[1] == state:
            return None
        self._written[group_id] = (group.generation, state)
        return self.store.submit(group_id, state)

    def in_flight(self, group_id: str) -> list[Future]:
        """A group's states submitted but not yet durable: a node that loses the group waits for them before
        it lets go, so that the next coordinator reads the last one."""
        return self.store.in_flight(group_id)

    def load(self) -> dict[str, str]:
        """Every consumer group's latest durable state that has members (storage I/O: never under the lock)."""
        return {g: state for g, state in self.store.load().items() if has_members(state)}

    def restore(self, states: dict[str, str]) -> None:
        """Under the lock: the members of these groups (`load`'s states) served again, their committed offsets
        kept; a group that has members here already, or whose state has none, is left as it is."""
        now = self._clock()
        for group_id, state in states.items():
            group = self._membership.groups.get(group_id) or Group(group_id)
            if group.members or group.active_classic is not None:
                continue
            if restore(group, state, now):
                self._membership.groups[group_id] = group
                self._written[group_id] = (group.generation, state)
                log.info("consumer group %s restored: %d members at generation %d", group_id, len(group.members),
                         group.generation)

    def close(self) -> None:
        self.store.close()
