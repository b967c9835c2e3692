"""Who owns a topic or a group: rendezvous (highest random weight) hashing over the live nodes.

Every node computes the same owner from the same set of nodes, and when a node joins or leaves only the
keys it wins or held move (about 1/N of them), so leadership spreads evenly without a coordinator.
"""

from __future__ import annotations

import hashlib
from typing import Sequence


def weight(node_id: str, key: str) -> int:
    digest = hashlib.blake2b(f"{node_id}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(key: str, node_ids: Sequence[str]) -> str:
    """The node that owns `key` (`topic:<name>` or `group:<id>`) among `node_ids` (not empty)."""
    if not node_ids:
        raise ValueError("no live nodes")
    return max(node_ids, key=lambda node_id: (weight(node_id, key), node_id))


def topic_key(topic: str) -> str:
    return f"topic:{topic}"


def group_key(group_id: str) -> str:
    return f"group:{group_id}"


def transaction_key(transactional_id: str) -> str:
    return f"txn:{transactional_id}"
