"""The coordinator's side of the cluster's hand-over of groups: groups another node coordinates now are
forgotten (once their accepted commits are durable), groups taken over are served once the previous
coordinator let go, with their committed offsets read again from the table, and KIP-848 groups' members
from theirs (`coordinator_consumer.py`).

Owns `Handover`, the part of `GroupCoordinator` that holds the groups being taken over.
`reassign` is called by the cluster membership's listener when the live nodes change (before the node
publishes its new view); the adoption runs later on timer threads of its own; `taking_over` from any
request thread. Group state is changed under the
coordinator's lock; loading the offsets table and waiting on commits happen outside it.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import wait
from typing import Callable

from lakelog.platform.cluster.errors import NotCoordinator
from lakelog.platform.groups.coordinator_consumer import ConsumerGroups
from lakelog.platform.groups.membership import Group, Membership
from lakelog.platform.groups.offsets import OffsetStore

log = logging.getLogger("lakelog.platform.groups.coordinator")  # the coordinator's one logger, whichever part logs


class Handover:
    """The coordinator's hand-over of groups between nodes.

    Thread contract: `reassign` is called by the cluster membership's listener, the adoption runs on
    timer threads of its own, `taking_over` from any request thread. The groups' state (`membership`,
    shared with the coordinator and its offsets) and the takeovers in progress (`_taking_over`,
    `_takeovers`) are changed under `lock`, the coordinator's; `taking_over` reads `_taking_over`
    without it (one dict lookup). Loading the offsets table (`store`, the offsets part's) and waiting
    on commits happen outside the lock.
    """

    def __init__(self, membership: Membership, lock: threading.RLock, store: OffsetStore,
                 request_timeout_ms: int, consumers: ConsumerGroups) -> None:
        """`membership`, `lock`: the coordinator's group state and its lock; `store`: the committed offsets'
        store (loaded, and its commits in flight waited on, up to `request_timeout_ms`); `consumers`: KIP-848
        groups' durable state, their members restored with the group."""
        self._membership = membership
        self._consumers = consumers
        self._lock = lock
        self._store = store
        self._request_timeout_s = request_timeout_ms / 1000
        self._taking_over: dict[str, int] = {}  # group -> the takeover (a count) that will serve it
        self._takeovers = 0

    def reassign(self, coordinated: Callable[[str], bool], coordinates: Callable[[str], bool],
                 released: Callable[[set[str]], bool], poll_s: float, wait_s: float) -> None:
        """The cluster moved groups between nodes (`coordinated`: this node's before, `coordinates`: now).

        Groups another node coordinates now are forgotten here (classic members rejoin there; KIP-848
        members go on there), once the commits and KIP-848 states accepted for them are durable: the node
        publishes its new view only after this returns. A group this node takes over is served once no
        other node claims it any more (`released`, asked every `poll_s`; at most `wait_s`, after which a
        node still claiming it is taken to be cut off); then its committed offsets (and a KIP-848 group's
        members) are read from the tables, the previous coordinator's last writes included, so that none
        regresses. Until then its requests are refused with a retriable
        NOT_COORDINATOR (`taking_over`)."""
        stored = self._store.load()
        states = self._consumers.load()
        with self._lock:
            lost = [g for g in self._membership.groups if not coordinates(g)]
            for group_id in lost:
                self._forget(group_id)
            known = set(stored) | set(states) | set(self._membership.groups)
            taken = {g for g in known if coordinates(g) and not coordinated(g)}
            for group_id in taken:
                self._forget(group_id)  # what this node knew of it is stale
            for group_id in [g for g in self._taking_over if not coordinates(g)]:
                del self._taking_over[group_id]  # moved on before this node served it
            self._takeovers += 1
            takeover = self._takeovers
            self._taking_over.update((g, takeover) for g in taken)
            in_flight = [f for g in lost for f in self._store.in_flight(g) + self._consumers.in_flight(g)]
        wait(in_flight, self._request_timeout_s)
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
            stored = self._store.load()
            states = self._consumers.load()
        except Exception:
            log.exception("offsets of groups taken over not loaded; retrying")
            threading.Timer(1.0, self._adopt, args=(groups, takeover)).start()
            return
        with self._lock:
            adopted = [g for g in groups if self._taking_over.get(g) == takeover]
            for group_id in adopted:
                if group_id in stored:
                    self._membership.groups[group_id] = Group(group_id, committed=dict(stored[group_id]))
                del self._taking_over[group_id]
            self._consumers.restore({g: states[g] for g in adopted if g in states})  # KIP-848 members go on

    def _forget(self, group_id: str) -> None:
        """Under the lock: another node coordinates the group now; Kafka members waiting here are told."""
        group = self._membership.groups.pop(group_id, None)
        if group is not None and group.classic is not None:
            group.classic.close(NotCoordinator(f"group {group_id!r} moved to another node"))

    def taking_over(self, group_id: str) -> bool:
        """Whether this node is still waiting to serve a group it takes over (see `reassign`)."""
        return group_id in self._taking_over
