"""The node's seat in a cluster: the membership it serves in, the client to the other nodes, the reads
relayed to a topic's leader and the forward objects of produce calls sent on by reference; which node
leads a topic, and its log ends.

Owns `ClusterSeat` only; the broker holds one, empty outside a cluster, and hands it to its produce face
and its log ends.
"""

from __future__ import annotations

from lakelog.platform.cluster import Membership, Node
from lakelog.platform.cluster.errors import NotInCluster, NotLeader
from lakelog.platform.cluster.forward_objects import ForwardObjects
from lakelog.platform.cluster.forwarding import NodeClient
from lakelog.platform.cluster.ownership import topic_key
from lakelog.platform.cluster.relay import LeaderReads
from lakelog.platform.storage import Storage


class ClusterSeat:
    """Where this node sits in a cluster: none until `join` (a node alone leads every topic).

    Thread contract: `join` is called once, before the node serves a cluster's calls (the server's
    start-up); from then on any thread reads the seat, without a lock, as it read the broker's fields
    before. `cluster` may be set directly (tests put a node in a membership without the rest).
    """

    def __init__(self) -> None:
        self.cluster: Membership | None = None  # set when this node serves in a cluster (`join`)
        self.nodes: NodeClient | None = None
        self.leader_reads: LeaderReads | None = None  # a clustered node: reads past the table, from the leader
        self.forward_objects: ForwardObjects | None = None  # a clustered node: produce forwarded by reference

    def join(self, membership: Membership, client: NodeClient, storage: Storage, node: str) -> None:
        """Serve as one node of a cluster: topics led by other nodes have their produce calls forwarded by
        reference (forward objects an earlier run of this node left are deleted first)."""
        self.forward_objects = ForwardObjects(storage, node)
        self.forward_objects.sweep()
        self.leader_reads = LeaderReads(client)  # acknowledged records live in the leader's memory
        self.cluster, self.nodes = membership, client

    def remote_leader(self, topic: str) -> Node | None:
        """The leader when it is another node; None when it is this one or this node has no fresh view
        (writing here is always correct, only not the cheapest)."""
        if self.cluster is None:
            return None
        try:
            view = self.cluster.view()
        except NotInCluster:
            return None
        leader = view.owner(topic_key(topic))
        return None if view.is_local(leader) else leader

    def check_leads(self, topic: str) -> None:
        """Refuse (NotLeader) when this node's view names another leader of `topic`; NotInCluster
        (retriable) without a fresh view. Nothing to check outside a cluster."""
        if self.cluster is None:
            return
        view = self.cluster.view()  # NotInCluster (retriable) without a fresh one
        leader = view.owner(topic_key(topic))
        if not view.is_local(leader):
            raise NotLeader(f"this node does not lead {topic!r}: {leader.node_id} does in its view of the cluster")

    def leader_ends(self, topic: str) -> list[int] | None:
        """At a node that does not lead `topic`: the leader's log end offsets, past the
        records it acknowledged (None when this node leads, or the leader gave no answer)."""
        if self.leader_reads is None:
            return None
        leader = self.remote_leader(topic)
        return None if leader is None else self.leader_reads.log_ends(leader, topic)

    def close(self) -> None:
        if self.nodes is not None:
            self.nodes.close()
