"""Produce bytes of one node, counted for the metrics (read at scrape time, `lakelog_produced_record_bytes`
and `lakelog_forward_*_bytes`): record bytes produced through this node, and the bytes of its node-to-node
produce calls, sent to leaders and answered by them. With the journal on, forwarded requests are references
(a few hundred bytes per group-send), not records."""

from __future__ import annotations

import threading


class Traffic:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.produced_bytes = 0  # keys and values of every produce call this node took (`PendingProduce.nbytes`)
        self.forward_request_bytes = 0  # request bodies sent to other nodes by forwarding
        self.forward_answer_bytes = 0  # their answers' bodies

    def produced(self, nbytes: int) -> None:
        with self._lock:
            self.produced_bytes += nbytes

    def forwarded(self, request_bytes: int, answer_bytes: int) -> None:
        with self._lock:
            self.forward_request_bytes += request_bytes
            self.forward_answer_bytes += answer_bytes
