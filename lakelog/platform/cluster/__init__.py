"""Many `lakelog serve` nodes on one root: who is alive (membership), who owns what (ownership: topic
leaders and group coordinators) and how a node hands work to the owner (forwarding).

No extra server: each node renews one heartbeat object under the root, and every node derives the same
owners from the same list of live nodes. Correctness never depends on it: the Delta log fences offsets
and producer state, so two nodes that both think they lead a topic still write each record once.
"""

from lakelog.platform.cluster.membership import Membership, Node, View
from lakelog.platform.cluster.ownership import owner

__all__ = ["Membership", "Node", "View", "owner"]
