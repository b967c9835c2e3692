"""Committed offsets in the control table `<root>/_control/consumer_offsets`.

Append-only: the latest row per (group, topic, partition) wins, ordered by the
`committed` time, which this store keeps strictly increasing. Commits are
batched: a writer thread takes every commit that arrived while the previous
append was in flight and appends them in one Delta commit; each caller's
future is answered only when that commit is durable.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake
from deltalake.exceptions import DeltaError

from lakelog.platform.catalog import open_control_table, read_control_table
from lakelog.platform.clock import now_ms
from lakelog.platform.errors import BrokerClosed, StorageUnavailable
from lakelog.platform.layout import OFFSETS_TABLE
from lakelog.platform.records import TopicPartition
from lakelog.platform.storage import Storage
from lakelog.schemas import CONSUMER_OFFSETS_SCHEMA

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: str | None
    committed_ms: int


@dataclass(frozen=True)
class OffsetRow:
    group: str
    topic: str
    partition: int
    offset: int
    metadata: str | None = None
    generation: int = -1


@dataclass
class _Pending:
    rows: list[OffsetRow]
    deadline: float
    future: Future = field(default_factory=Future)


Durable = Callable[[list[OffsetRow], int], None]


class OffsetStore:
    def __init__(self, storage: Storage, on_durable: Durable, linger_ms: int = 2, timeout_ms: int = 30_000) -> None:
        self._storage = storage
        self._dt = open_control_table(storage, OFFSETS_TABLE, CONSUMER_OFFSETS_SCHEMA)
        self._on_durable = on_durable
        self._linger_s = linger_ms / 1000
        self._timeout_s = timeout_ms / 1000
        self._pending: list[_Pending] = []
        self._cond = threading.Condition()
        self._closed = False
        self._busy = False
        self._last_ms = 0
        self.commits = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="offsets-writer", daemon=True)
        self._thread.start()

    # ---- reads --------------------------------------------------------------

    def load(self) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """Every group's latest committed offsets, from the table."""
        self._dt.update_incremental()
        if self._dt.version() <= 0:
            return {}
        table = read_control_table(self._storage, self._dt)
        if table.num_rows == 0:
            return {}
        table = table.take(pc.sort_indices(table, sort_keys=[("committed", "ascending")]))
        stamps = table.column("committed").cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_pylist()
        self._last_ms = max(stamps)
        groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        columns = [table.column(n).to_pylist() for n in ("group", "topic", "partition", "offset", "metadata")]
        for group, topic, partition, offset, metadata, stamp in zip(*columns, stamps):
            groups.setdefault(group, {})[(topic, partition)] = CommittedOffset(offset, metadata, stamp)
        return groups

    # ---- writes -------------------------------------------------------------

    def submit(self, rows: list[OffsetRow]) -> Future:
        """Queue rows for the next append; the future completes (None) once they are durable."""
        pending = _Pending(rows, time.monotonic() + self._timeout_s)
        if not rows:
            pending.future.set_result(None)
            return pending.future
        with self._cond:
            if self._closed:
                raise BrokerClosed("the offset store is closed")
            self._pending.append(pending)
            self._cond.notify_all()
        return pending.future

    def close(self) -> None:
        """Write what is pending, then stop."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending and self._closed:
                    return
                if not self._closed and self._linger_s:
                    self._cond.wait(self._linger_s)
                batch, self._pending = self._pending, []
                self._busy = True
            try:
                self._write(batch)
            except Exception as exc:  # never let the writer die: fail the callers instead
                log.exception("offset commit failed")
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _write(self, batch: list[_Pending]) -> None:
        latest: dict[tuple[str, str, int], OffsetRow] = {}
        for pending in batch:
            for row in pending.rows:
                latest[(row.group, row.topic, row.partition)] = row  # the last commit in the batch wins
        stamp = max(now_ms(), self._last_ms + 1)
        rows = list(latest.values())
        table = pa.Table.from_pydict(
            {
                "group": [r.group for r in rows],
                "topic": [r.topic for r in rows],
                "partition": [r.partition for r in rows],
                "offset": [r.offset for r in rows],
                "metadata": [r.metadata for r in rows],
                "generation": [r.generation for r in rows],
                "committed": pa.array([stamp] * len(rows), pa.int64()).cast(CONSUMER_OFFSETS_SCHEMA.field(
                    "committed").type),
            },
            schema=CONSUMER_OFFSETS_SCHEMA,
        )
        deadline = max(p.deadline for p in batch)
        while True:
            try:
                write_deltalake(self._dt, table, mode="append")
                break
            except (DeltaError, OSError) as exc:
                self.failures += 1
                if time.monotonic() >= deadline:
                    error = StorageUnavailable(f"could not commit offsets: {exc}")
                    for pending in batch:
                        pending.future.set_exception(error)
                    return
                time.sleep(0.05)
                try:
                    self._dt.update_incremental()
                except (DeltaError, OSError):
                    pass
        self._last_ms = stamp
        self.commits += 1
        self._on_durable(rows, stamp)
        for pending in batch:
            pending.future.set_result(None)
