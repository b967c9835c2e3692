"""Which transactional ids this node may act on while the cluster moves them between nodes: the
transactions' side of the hand-over that groups have (groups/coordinator_handover.py).

A node acts on an id (a call, the reaper, a state row stored) only inside `acting`, which refuses with a
retriable NOT_COORDINATOR unless the node serves the id:
- **Letting go.** `reassign` runs in the cluster membership's listener, before the node publishes its new
  view. From its first line the ids the node lost are refused, and it returns only once no call on them
  is in progress (at most `let_go_s`): so once the node's heartbeat object carries the new view, it stores
  no more rows for them.
- **Taking over.** An id the node gains is served only once no other live node's published view makes that
  node its owner (the other nodes' views are read every `poll_s`; a node out of this node's view, its
  heartbeat lapsed by the store's clock, claims nothing), or at most `wait_s` later (a node still claiming
  it then is taken to be cut off), as groups wait. The ids are not enumerated (a new id moves too): each is
  judged when asked, from the views last read, with no I/O on the request path.
Without a cluster (`reassign` never called) every id is served.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Sequence

from lakelog.platform.cluster.errors import NotCoordinator
from lakelog.platform.cluster.ownership import owner, transaction_key

log = logging.getLogger(__name__)
KEPT_TAKEOVERS = 64  # takeovers remembered to tell whether a state read before one is stale

# The other live nodes' published views (node id -> the node ids of the view it acted on; None: not known,
# which claims every id).
Published = Callable[[], Mapping[str, "Sequence[str] | None"]]


@dataclass
class Takeover:
    number: int
    taken: Callable[[str], bool]  # the ids this view change gave the node
    nodes: frozenset[str]  # the new view's node ids
    deadline: float
    claims: dict[str, Sequence[str] | None] | None = None  # the other nodes' views, last read (None: not yet)
    done: bool = False

    def claimed(self, transactional_id: str) -> bool:
        """Whether another node may still act on this id taken over (from the views last read)."""
        if self.done or not self.taken(transactional_id):
            return False
        if self.claims is None:
            return True
        key = transaction_key(transactional_id)
        return any(view is None or owner(key, list(view)) == node for node, view in self.claims.items())

    def settled(self) -> bool:
        """Every other node acted on this view (or an equal one): none claims an id this node owns."""
        return self.claims is not None and all(
            view is not None and frozenset(view) == self.nodes for view in self.claims.values())


class Handover:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._coordinates: Callable[[str], bool] | None = None  # the latest view's ownership (None: no cluster)
        self._takeovers: dict[int, Takeover] = {}  # pending or recent, by number
        self._number = 0
        self._acting: dict[str, int] = {}  # id -> calls in progress on it
        self._closed = False

    @property
    def generation(self) -> int:
        """The number of the latest view change (a state read before a takeover of its id is stale)."""
        with self._cond:
            return self._number

    def taken_since(self, transactional_id: str, generation: int) -> bool:
        """Whether a view change after `generation` gave this node the id (what it read before is stale)."""
        with self._cond:
            if generation >= self._number:
                return False
            if generation < self._number - len(self._takeovers):
                return True  # older than the takeovers remembered
            return any(n > generation and t.taken(transactional_id) for n, t in self._takeovers.items())

    def serving(self, transactional_id: str) -> bool:
        with self._cond:
            return self._serving(transactional_id)

    def _serving(self, transactional_id: str) -> bool:
        if self._coordinates is not None and not self._coordinates(transactional_id):
            return False
        return not any(t.claimed(transactional_id) for t in self._takeovers.values())

    @contextmanager
    def acting(self, transactional_id: str) -> Iterator[None]:
        """Around everything a node does for an id it coordinates: refused unless it serves the id, and
        waited for by `reassign` when the id moves away."""
        with self._cond:
            if not self._serving(transactional_id):
                log.info("transactional id %r: not coordinated here (now), refused", transactional_id)
                raise NotCoordinator(f"transactional id {transactional_id!r} is not coordinated by this node "
                                     "(it moved, or is being taken over): ask FindCoordinator again")
            self._acting[transactional_id] = self._acting.get(transactional_id, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                left = self._acting.pop(transactional_id) - 1
                if left:
                    self._acting[transactional_id] = left
                self._cond.notify_all()

    def reassign(self, coordinated: Callable[[str], bool], coordinates: Callable[[str], bool],
                 nodes: Sequence[str], published: Published, poll_s: float, wait_s: float,
                 let_go_s: float | None = None) -> None:
        """The cluster's view changed (`coordinated`: this node's ids before, `coordinates`: now, `nodes`:
        the new view's node ids). Returns once the calls in progress on ids lost are over (at most
        `let_go_s`, default `wait_s`); the ids gained are served once released (at most `wait_s`)."""
        with self._cond:
            self._coordinates = coordinates
            self._number += 1
            takeover = Takeover(self._number, lambda i: coordinates(i) and not coordinated(i), frozenset(nodes),
                                self._clock() + wait_s)
            self._takeovers[takeover.number] = takeover
            for number in sorted(self._takeovers)[:-KEPT_TAKEOVERS]:
                del self._takeovers[number]
            let_go_s = wait_s if let_go_s is None else let_go_s
            end = self._clock() + let_go_s
            while True:
                busy = sorted(i for i, n in self._acting.items() if n and not coordinates(i))
                if not busy:
                    break
                if self._clock() >= end:
                    log.warning("transactional ids %s still in progress here after %.1f s; letting go anyway",
                                busy, let_go_s)
                    break
                self._cond.wait(min(0.05, max(end - self._clock(), 0.001)))
        self._poll(takeover, published, poll_s, delay_s=0.0)

    def _poll(self, takeover: Takeover, published: Published, poll_s: float, delay_s: float) -> None:
        def check() -> None:
            try:
                claims = published()
            except Exception:
                log.exception("whether transactional ids taken over were released not known; asking again")
                claims = None
            with self._cond:
                if self._closed:
                    return
                if claims is not None:
                    takeover.claims = dict(claims)
                if takeover.settled() or self._clock() >= takeover.deadline:
                    takeover.done = True
                    return
            self._poll(takeover, published, poll_s, poll_s)

        timer = threading.Timer(delay_s, check)
        timer.daemon = True
        timer.start()

    def close(self) -> None:
        with self._cond:
            self._closed = True
