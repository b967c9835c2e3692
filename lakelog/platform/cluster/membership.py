"""Who is in the cluster: one heartbeat object per node under `<root>/_cluster/nodes/`, renewed every
`broker.heartbeat.interval.ms`, and a LIST of them.

A node is live while its object was modified within `broker.session.timeout.ms` of this node's own latest
renewal, both times by the store's clock, so the nodes' clocks need not agree. A round costs one PUT and
one LIST (plus one GET for a node seen for the first time). A draining node deletes its object: the
others stop routing to it at their next round. A node that has not completed a round within the session
timeout (paused, or cut off from the store) does not act on its old view: `view()` refuses until it renews.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from lakelog.platform.cluster.errors import NotInCluster
from lakelog.platform.cluster.ownership import owner
from lakelog.platform.layout import CLUSTER_NODES
from lakelog.platform.storage import STORAGE_ERRORS, Storage

log = logging.getLogger(__name__)
NODE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass(frozen=True)
class Node:
    node_id: str
    address: str  # the URL other nodes call it at
    kafka: str | None = None  # host:port of its Kafka listener, if it has one

    def to_json(self, view: list[str] | None = None) -> bytes:
        fields: dict = {"node_id": self.node_id, "address": self.address, "kafka": self.kafka}
        if view is not None:
            fields["view"] = view
        return json.dumps(fields).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Node:
        fields = json.loads(data)
        kafka = fields.get("kafka")
        return cls(str(fields["node_id"]), str(fields["address"]), None if kafka is None else str(kafka))


@dataclass(frozen=True)
class View:
    """The live nodes as one node sees them after a round, and what follows: who owns each key."""

    local: Node
    nodes: tuple[Node, ...]  # sorted by node id, the local node included
    _by_id: dict[str, Node] = field(default_factory=dict, compare=False, repr=False)
    _owners: dict[str, Node] = field(default_factory=dict, compare=False, repr=False)  # key -> owner, memo

    def __post_init__(self) -> None:
        self._by_id.update({node.node_id: node for node in self.nodes})

    def owner(self, key: str) -> Node:
        if len(self.nodes) == 1:  # a node alone owns everything (asked on every produce call)
            return self.nodes[0]
        found = self._owners.get(key)
        if found is None:
            found = self._owners[key] = self._by_id[owner(key, [node.node_id for node in self.nodes])]
        return found

    def is_local(self, node: Node) -> bool:
        return node.node_id == self.local.node_id


def node_id_of(address: str) -> str:
    """The default node id: its address, so that a node restarted at the same address takes its own place
    (and its own heartbeat object) instead of leaving a ghost until the session timeout."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", address.split("://", 1)[-1]).strip("_")[:64] or "node"


def check_node_id(node_id: str) -> str:
    if not NODE_ID.match(node_id):
        raise ValueError(f"node id must be 1-64 letters, digits, '.', '_' or '-', got {node_id!r}")
    return node_id


# `listener(old, new)`; `old` is None when this node's membership lapsed (paused or cut off past the session
# timeout, so the others may have taken its work meanwhile): what it held before is stale.
Listener = Callable[["View | None", View], None]


class Membership:
    def __init__(self, storage: Storage, local: Node, heartbeat_interval_ms: int, session_timeout_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        check_node_id(local.node_id)
        self.storage = storage
        self.local = local
        self.interval_s = heartbeat_interval_ms / 1000
        self.timeout_s = session_timeout_ms / 1000
        self._clock = clock
        self._known: dict[str, Node] = {local.node_id: local}
        self._modified: dict[str, float] = {}  # node id -> its object's time in the last listing
        self._suspects: dict[str, float] = {}  # node id -> its object's time when a connection to it failed
        self._live: tuple[Node, ...] = (local,)
        self._view = View(local, (local,))
        self._renewed_at = -float("inf")  # our clock, when the last round that completed began
        self._round_lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def folder(self) -> str:
        return self.storage.uri(CLUSTER_NODES)

    def on_change(self, listener: Listener) -> None:
        """`listener(old, new)` runs when a round (or a suspicion) changes the live nodes, and at the first
        round after a lapse (`old` None: the node starts over from nothing, even if the live nodes look the
        same), before the new view is published; it must not call back into the membership."""
        self._listeners.append(listener)

    def start(self) -> None:
        """Join: the first round runs here (a store that is down raises), the next ones on a thread."""
        self.round()
        self._thread = threading.Thread(target=self._loop, name="lakelog-membership", daemon=True)
        self._thread.start()

    def view(self) -> View:
        """The live nodes, as of the last round. No I/O: it is asked on the request path. When that round
        is older than the session timeout (this node was paused, or cannot reach the store), the others
        may have moved its topics and groups already: NotInCluster until the heartbeat thread renews."""
        if self._clock() - self._renewed_at <= self.timeout_s:
            return self._view
        raise NotInCluster(f"node {self.local.node_id} has not renewed its membership for "
                           f"{self._clock() - self._renewed_at:.1f} s (store unreachable, or the process was paused)")

    def round(self) -> View:
        """Renew our heartbeat object, list everyone's, and work out who is live."""
        with self._round_lock:
            previous = self._modified.get(self.local.node_id)  # our object's time at our last round
            # The others count the session from our object's time, which is after this instant: counted
            # from here, our view lapses before any of them can count us out (not after: a slow listing
            # must not leave two nodes acting on one group or id).
            renewed = self._clock()
            # With the live nodes of our last round: the others learn that we acted on it (see `released`).
            self.storage.write_bytes(self._object(self.local.node_id),
                                     self.local.to_json([n.node_id for n in self._view.nodes]))
            modified = self.storage.list_modified(self.folder)
            own = modified.get(self._name(self.local.node_id))
            if own is None:  # not listed right after our own write: the listing is not to be trusted
                raise OSError("own heartbeat object missing from the listing")
            live = [self._node(name) for name, at in modified.items()
                    if name.endswith(".json") and at >= own - self.timeout_s]
            nodes = tuple(sorted((n for n in live if n is not None), key=lambda n: n.node_id))
            self._known = {n.node_id: n for n in nodes}  # one that left is read again if it comes back
            self._modified = {name.removesuffix(".json"): at for name, at in modified.items()}
            # A suspect that renewed since (it restarted, or was only slow) is trusted again.
            self._suspects = {node_id: at for node_id, at in self._suspects.items()
                              if self._modified.get(node_id, at) <= at}
            # The others count a node out once its object is older than the session timeout by their own
            # renewals, so only a gap that long between two of ours (paused, or cut off from the store) let
            # them take this node's topics and groups and move on: what it holds from before is stale then,
            # whatever the view says. Both times are the store's, as theirs are.
            lapsed = previous is not None and own - previous > self.timeout_s
            self._live = nodes
            if not lapsed:
                self._renewed_at = renewed
            old = self._view
            view = self._publish(lapsed)
            if view is not old:
                self._renew_after_listeners()
            # After a lapse, requests stay refused (`view()`) until the listeners dropped the stale state.
            self._renewed_at = renewed
            return view

    def _renew_after_listeners(self) -> None:
        """Renew once more after listeners ran (under the round lock), publishing the view they acted on: their
        time (a group takeover reads the offsets table) must not count as a gap between renewals, or a slow
        store made every round after a lapse look like a lapse again and the node never came back."""
        try:
            self.storage.write_bytes(self._object(self.local.node_id),
                                     self.local.to_json([n.node_id for n in self._view.nodes]))
            own = self.storage.list_modified(self.folder).get(self._name(self.local.node_id))
        except STORAGE_ERRORS as exc:
            log.warning("heartbeat of %s after a view change failed: %s", self.local.node_id, exc)
            return
        if own is not None:
            self._modified[self.local.node_id] = own

    def released(self, keys: set[str]) -> bool:
        """Whether no other live node owns any of `keys` in the view its heartbeat object published last.
        A node publishes a view only after its listeners acted on it (a group coordinator forgot the groups
        it lost and made their last commits durable), so a new owner that waits for this takes over after
        the old one let go. One GET per other node."""
        for node_id, published in self.published_views().items():
            if published is None or any(owner(key, published) == node_id for key in keys):
                return False
        return True

    def published_views(self, nodes: Sequence[Node] | None = None) -> dict[str, list[str] | None]:
        """Each other live node's (or each of `nodes'`, as a listener's new view names them) published view:
        the node ids of the view it acted on last (None: not known, not published yet by an older node or
        one that has not completed a round, or unreadable). One GET per other node."""
        views: dict[str, list[str] | None] = {}
        for node in self._view.nodes if nodes is None else nodes:
            if node.node_id == self.local.node_id:
                continue
            try:
                published = json.loads(self.storage.read_bytes(self._object(node.node_id))).get("view")
            except (*STORAGE_ERRORS, ValueError, AttributeError):
                published = None
            ok = isinstance(published, list) and node.node_id in published
            views[node.node_id] = [str(n) for n in published] if ok else None
        return views

    def suspect(self, node_id: str) -> None:
        """A connection to `node_id` was refused: its process is gone (killed, restarting). It owns
        nothing in this node's view until its heartbeat object is renewed again, instead of for the rest
        of the session timeout."""
        if node_id == self.local.node_id:
            return
        with self._round_lock:
            if node_id in self._suspects or node_id not in self._modified:
                return
            self._suspects[node_id] = self._modified[node_id]
            log.info("node %s unreachable: out of this node's view until it renews", node_id)
            self._publish()

    def _publish(self, lapsed: bool = False) -> View:
        """The view from the live nodes and the suspects (under the round lock). Listeners run before it
        is published: a group this node takes over has its offsets loaded before a request finds it here.
        `lapsed`: the listeners hear that this node held nothing before (old None)."""
        old = self._view
        nodes = tuple(n for n in self._live if n.node_id not in self._suspects)
        if nodes == old.nodes and not lapsed:
            return old
        new = View(self.local, nodes)
        log.info("cluster nodes: %s%s", ", ".join(n.node_id for n in new.nodes),
                 " (membership renewed after a lapse: starting over)" if lapsed else "")
        for listener in self._listeners:
            try:
                listener(None if lapsed else old, new)
            except Exception:
                log.exception("cluster listener failed")
        self._view = new
        return new

    def leave(self) -> None:
        """Drain: stop renewing and delete our object, so that the others take our work at their next round."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
        try:
            self.storage.delete_files([self._object(self.local.node_id)])
        except STORAGE_ERRORS:
            log.warning("heartbeat object of %s not deleted; the others drop it after the session timeout",
                        self.local.node_id)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.round()
            except STORAGE_ERRORS as exc:
                log.warning("heartbeat of %s failed: %s", self.local.node_id, exc)

    def _node(self, name: str) -> Node | None:
        node_id = name.removesuffix(".json")
        known = self._known.get(node_id)
        if known is None:
            try:
                known = self._known[node_id] = Node.from_json(self.storage.read_bytes(self._object(node_id)))
            except (FileNotFoundError, ValueError, KeyError):  # gone since the listing, or not ours
                return None
        return known

    def _name(self, node_id: str) -> str:
        return f"{node_id}.json"

    def _object(self, node_id: str) -> str:
        return f"{self.folder}/{self._name(node_id)}"


def owns_key(cluster: Membership | None, key: str) -> bool:
    """Whether this node owns `key` (`group:<id>`, `txn:<id>`) now: rendezvous ownership over the live nodes
    (always, alone; never without a fresh view of the cluster)."""
    if cluster is None:
        return True
    try:
        view = cluster.view()
    except NotInCluster:
        return False
    return view.is_local(view.owner(key))
