"""Reads relayed to a topic's leader: with the node journal on, records the leader acknowledged live in its
memory until its table commit, so a node that does not lead the topic asks the leader for a fetch at or
past its own table's end, and for the log end offsets it reports (describe, `latest`, a group's lag).
Consumers on any node then see a record once it is acknowledged, not one commit interval later.

A relay that fails (the leader unreachable, slow, or refusing) is no error to the caller: the node answers
from its table, as with the journal off, at most one interval behind. A leader that failed is not asked
again for a few seconds, so that a stopped leader does not cost every fetch a timeout.
"""

from __future__ import annotations

import logging
import threading
import time

import orjson

from lakelog.platform.cluster.errors import NodeUnavailable
from lakelog.platform.cluster.forwarding import NodeClient
from lakelog.platform.cluster.membership import Node
from lakelog.platform.cluster.wire import FetchAsk, decode_fetched
from lakelog.platform.errors import LakelogError
from lakelog.platform.records import FetchResult

log = logging.getLogger(__name__)
REPLY_MS = 1000  # of a long poll's wait, kept for the leader's answer to come back
MIN_ANSWER_MS = 1000  # a fetch that does not wait still gets this long for the leader's answer
ENDS_TIMEOUT_S = 2.0
SKIP_S = 3.0  # a leader that failed is not asked again for this long


def split_wait(timeout_ms: int) -> tuple[int, float]:
    """A relayed fetch's wait: how long the leader may wait for records (ms), and how long this node waits
    for its answer (s); never longer than the caller's wait, but for a fetch that waits less than
    MIN_ANSWER_MS (a read still takes a round trip)."""
    timeout_ms = max(timeout_ms, 0)
    leader_ms = timeout_ms - min(REPLY_MS, timeout_ms // 2)
    return leader_ms, max(timeout_ms, MIN_ANSWER_MS) / 1000


def at_least(ends: list[int] | None, partition: int, end: int) -> int:
    """`end`, or the leader's end of `partition` when it is known and further (never backwards)."""
    if ends is None or not 0 <= partition < len(ends):
        return end
    return max(end, ends[partition])


class LeaderReads:
    """A non-leader's reads asked of the topic's leader (one per clustered node with the journal on)."""

    def __init__(self, client: NodeClient) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._failed_at: dict[str, float] = {}  # node id -> monotonic time of its last failed relay

    def fetch(self, leader: Node, topic: str, partition: int, offset: int, max_records: int,
              max_bytes: int | None, timeout_ms: int, min_bytes: int) -> FetchResult | None:
        """The leader's answer to the fetch (its journal's memory or its table); None when it gave none."""
        if self._skipped(leader):
            return None
        leader_ms, answer_s = split_wait(timeout_ms)
        ask = FetchAsk(partition, offset, max_records, max_bytes, leader_ms, min_bytes)
        try:
            answer = decode_fetched(topic, partition, self._client.fetch(leader, topic, ask.encode(), answer_s))
        except Exception as exc:  # any failure: the table answers instead
            self._failed(leader, f"fetch {topic}-{partition} at {offset}", exc)
            return None
        self._answered(leader)
        return answer

    def log_ends(self, leader: Node, topic: str) -> list[int] | None:
        """The leader's log end offset of each partition; None when it gave none."""
        if self._skipped(leader):
            return None
        try:
            ends = orjson.loads(self._client.log_ends(leader, topic, ENDS_TIMEOUT_S))
            if not isinstance(ends, list) or not all(isinstance(e, int) for e in ends):
                raise ValueError(f"not a list of offsets: {ends!r}")
        except Exception as exc:
            self._failed(leader, f"log ends of {topic}", exc)
            return None
        self._answered(leader)
        return ends

    def _skipped(self, leader: Node) -> bool:
        with self._lock:
            failed_at = self._failed_at.get(leader.node_id)
        return failed_at is not None and time.monotonic() - failed_at < SKIP_S

    def _failed(self, leader: Node, what: str, exc: Exception) -> None:
        if isinstance(exc, LakelogError) and not isinstance(exc, NodeUnavailable):
            # The leader answered, refusing (the offset out of its range, the topic gone): the table answers
            # this one, the next is asked again.
            log.debug("leader %s refused a relayed %s, answering from the table: %s", leader.node_id, what, exc)
            return
        with self._lock:
            first = leader.node_id not in self._failed_at
            self._failed_at[leader.node_id] = time.monotonic()
        (log.info if first else log.debug)("relay to leader %s failed (%s), answering from the table: %s",
                                           leader.node_id, what, exc)

    def _answered(self, leader: Node) -> None:
        with self._lock:
            if self._failed_at.pop(leader.node_id, None) is not None:
                log.info("relay to leader %s answers again", leader.node_id)
