"""The producer's accumulator: records queued per topic, drained as batches by linger.ms and batch.size
(pure: the caller passes the time and holds the lock)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Pending:
    """One produce call (or one Arrow table when `table` is set) waiting for its batch."""

    topic: str
    size: int
    enqueued_at: float
    record: dict[str, Any] | None = None
    table: Any = None
    count: int = 1
    report: Any = None  # what the producer needs to complete it (message, callback, future)


@dataclass
class Accumulator:
    linger_s: float
    batch_bytes: int
    batch_messages: int
    queues: dict[str, deque[Pending]] = field(default_factory=dict)

    def add(self, item: Pending) -> None:
        self.queues.setdefault(item.topic, deque()).append(item)

    def __len__(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def _full(self, queue: deque[Pending]) -> bool:
        if queue[0].table is not None:
            return True
        size = count = 0
        for item in queue:
            if item.table is not None:
                return True  # a table waits behind these records: send them now
            size += item.size
            count += 1
            if size >= self.batch_bytes or count >= self.batch_messages:
                return True
        return False

    def ready(self, now: float, flushing: bool = False) -> list[str]:
        """Topics whose batch is due: full, lingered long enough, or a flush asked for everything."""
        return [topic for topic, queue in self.queues.items() if queue and
                (flushing or self._full(queue) or now - queue[0].enqueued_at >= self.linger_s)]

    def next_due(self, now: float) -> float | None:
        """Seconds until the oldest waiting record has lingered enough; None when nothing waits."""
        waits = [queue[0].enqueued_at + self.linger_s - now for queue in self.queues.values() if queue]
        return max(min(waits), 0.0) if waits else None

    def drain(self, topic: str) -> list[Pending]:
        """The next batch of a topic: one table alone, or records up to batch.size / batch.num.messages
        (always at least one, however large)."""
        queue = self.queues.get(topic)
        if not queue:
            return []
        if queue[0].table is not None:
            return [queue.popleft()]
        batch: list[Pending] = []
        size = 0
        while queue and queue[0].table is None and len(batch) < self.batch_messages and \
                (not batch or size + queue[0].size <= self.batch_bytes):
            item = queue.popleft()
            size += item.size
            batch.append(item)
        if not queue:
            del self.queues[topic]
        return batch
