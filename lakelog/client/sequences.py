"""Idempotent-producer bookkeeping: producer id, epoch and the next sequence per topic (pure, no I/O).

The server runs a producer's sequence per topic (one produce call's records get base, base+1, ...,
whatever partitions they land on) and answers a retried (epoch, base, count) with the first answer's
offsets. Ids from 2^62 up stand for Idempotency-Keys, so a client picks its id below that.
"""

from __future__ import annotations

import secrets

IDEMPOTENCY_BASE = 1 << 62
MAX_SEQUENCE = 2**31 - 1
MAX_EPOCH = 32767


def new_producer_id() -> int:
    """A random id below 2^62: collisions between producers are as unlikely as a UUID's."""
    return secrets.randbits(62)


class Sequences:
    """Where each topic's next batch starts. A batch's sequence is only spent once the server took it."""

    def __init__(self, producer_id: int | None = None, epoch: int = 0) -> None:
        self.producer_id = new_producer_id() if producer_id is None else producer_id
        if not 0 <= self.producer_id < IDEMPOTENCY_BASE:
            raise ValueError(f"producer id must be in 0 .. 2^62-1, got {self.producer_id}")
        self.epoch = epoch
        self._next: dict[str, int] = {}

    def reserve(self, topic: str, count: int) -> tuple[int, int, int]:
        """(producer id, epoch, base sequence) for a batch of `count` records; a batch that would pass
        the int32 sequence space starts a new epoch (which starts every topic at 0)."""
        base = self._next.get(topic, 0)
        if base + count - 1 > MAX_SEQUENCE:
            self.bump_epoch()
            base = 0
        return self.producer_id, self.epoch, base

    def delivered(self, topic: str, epoch: int, base: int, count: int) -> None:
        """The server took (or had taken) the batch: the topic's next batch starts after it."""
        if epoch == self.epoch:
            self._next[topic] = base + count

    def bump_epoch(self) -> None:
        """After an outcome the client cannot know (retries ran out) or a fencing answer: sequences of
        the old epoch may be spent or not, so continue in a new epoch from 0 (a new id past 32767)."""
        if self.epoch >= MAX_EPOCH:
            self.producer_id, self.epoch = new_producer_id(), 0
        else:
            self.epoch += 1
        self._next.clear()

    def next_sequence(self, topic: str) -> int:
        return self._next.get(topic, 0)
