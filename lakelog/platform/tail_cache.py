"""Recently written records, kept in memory by the node that wrote them.

A chunk is one flush's records of one partition: offsets [start, end), dense.
Offsets are final once committed, so a chunk stays correct whoever writes
next; only retention or compaction can make it stale, and the caller drops
the cache of a partition whose log start moved past it.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class Chunk:
    start: int
    end: int  # exclusive
    table: pa.Table  # TOPIC_FILE_SCHEMA columns, sorted by offset


class TailCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._chunks: dict[int, list[Chunk]] = {}
        self._order: OrderedDict[tuple[int, int], int] = OrderedDict()  # (partition, start) -> bytes
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, partition: int, table: pa.Table, start: int) -> None:
        if self.max_bytes <= 0 or table.num_rows == 0:
            return
        chunk = Chunk(start, start + table.num_rows, table)
        size = table.nbytes
        with self._lock:
            chunks = self._chunks.setdefault(partition, [])
            at = bisect.bisect_left([c.start for c in chunks], start)
            chunks.insert(at, chunk)
            self._order[(partition, start)] = size
            self._bytes += size
            while self._bytes > self.max_bytes and self._order:
                (p, s), evicted = self._order.popitem(last=False)
                self._bytes -= evicted
                self._chunks[p] = [c for c in self._chunks[p] if c.start != s]

    def read(self, partition: int, offset: int, max_records: int) -> list[pa.Table]:
        """Contiguous cached records from `offset`; empty when `offset` is not cached."""
        with self._lock:
            chunks = list(self._chunks.get(partition, ()))
        out: list[pa.Table] = []
        want, next_offset = max_records, offset
        for chunk in chunks:
            if chunk.end <= next_offset:
                continue
            if chunk.start > next_offset or want <= 0:
                break
            piece = chunk.table.slice(next_offset - chunk.start, want)
            out.append(piece)
            want -= piece.num_rows
            next_offset += piece.num_rows
        return out

    def drop_partition(self, partition: int) -> None:
        with self._lock:
            for chunk in self._chunks.pop(partition, []):
                self._bytes -= self._order.pop((partition, chunk.start), 0)
