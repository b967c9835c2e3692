"""Which share groups this node holds now. A group's state is read from `_control/share_state` when the group
comes to this node (its first use here, or its return after another node served it), so a node never serves
from a copy another node has moved on from; it is dropped from memory when the group goes to another node."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from lakelog.platform.cluster.membership import Membership, owns_key
from lakelog.platform.cluster.ownership import group_key


class Holdings:
    def __init__(self, owns: Callable[[str], bool]) -> None:
        """`owns(group)`: whether this node coordinates the group now (always, alone)."""
        self._owns = owns
        self._held: set[str] = set()
        self._lock = threading.Lock()

    def held(self, group_id: str) -> bool:
        with self._lock:
            return group_id in self._held

    def hold(self, group_id: str) -> None:
        with self._lock:
            self._held.add(group_id)

    def let_go(self, group_id: str) -> None:
        with self._lock:
            self._held.discard(group_id)

    def gone(self, groups: Iterable[str]) -> list[str]:
        """The held groups among `groups` that this node does not coordinate any more; no longer held."""
        with self._lock:
            held = [g for g in groups if g in self._held]
        left = [g for g in held if not self._owns(g)]
        with self._lock:
            self._held.difference_update(left)
        return left


def group_owner(cluster: Membership | None) -> Callable[[str], bool]:
    """Whether this node coordinates a group now: rendezvous ownership of `group:<id>` over the live nodes
    (always, alone; never without a fresh view of the cluster), as the Kafka listener's FindCoordinator."""
    return lambda group_id: owns_key(cluster, group_key(group_id))
