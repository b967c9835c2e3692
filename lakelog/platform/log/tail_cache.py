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
from typing import Iterable

import pyarrow as pa


@dataclass(frozen=True)
class Chunk:
    start: int
    end: int  # exclusive
    table: pa.Table  # TOPIC_FILE_SCHEMA columns, sorted by offset


class TailCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._chunks: dict[int, list[Chunk]] = {}  # per partition, by start
        self._starts: dict[int, list[int]] = {}  # the chunks' starts, to bisect
        self._order: OrderedDict[tuple[int, int], int] = OrderedDict()  # (partition, start) -> bytes
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, partition: int, table: pa.Table, start: int, nbytes: int | None = None) -> None:
        """`nbytes`: the table's size if the caller knows it (measuring many small slices costs)."""
        if self.max_bytes <= 0 or table.num_rows == 0:
            return
        chunk = Chunk(start, start + table.num_rows, table)
        size = table.nbytes if nbytes is None else nbytes
        with self._lock:
            chunks, starts = self._chunks.setdefault(partition, []), self._starts.setdefault(partition, [])
            at = len(starts) if not starts or start > starts[-1] else bisect.bisect_left(starts, start)
            chunks.insert(at, chunk)  # an append in the common case: each flush follows the last
            starts.insert(at, start)
            self._order[(partition, start)] = size
            self._bytes += size
            while self._bytes > self.max_bytes and self._order:
                (p, s), evicted = self._order.popitem(last=False)
                self._bytes -= evicted
                self._remove(p, s)

    def _remove(self, partition: int, start: int) -> None:
        starts = self._starts[partition]
        at = bisect.bisect_left(starts, start)
        if at < len(starts) and starts[at] == start:
            del starts[at]
            del self._chunks[partition][at]

    def read(self, partition: int, offset: int, max_records: int) -> list[pa.Table]:
        """Contiguous cached records from `offset`; empty when `offset` is not cached."""
        with self._lock:
            starts, chunks = self._starts.get(partition, []), self._chunks.get(partition, [])
            return contiguous(chunks[max(bisect.bisect_right(starts, offset) - 1, 0):], offset, max_records)

    def drop_partition(self, partition: int) -> None:
        with self._lock:
            self._starts.pop(partition, None)
            for chunk in self._chunks.pop(partition, []):
                self._bytes -= self._order.pop((partition, chunk.start), 0)


def contiguous(chunks: Iterable[Chunk], offset: int, max_records: int) -> list[pa.Table]:
    """The run of records from `offset` on in `chunks` (sorted by start), up to `max_records` and the first
    gap: slices of the chunks' tables, empty when no chunk holds `offset`. Chunks ending before it are
    passed over."""
    out: list[pa.Table] = []
    want, at = max_records, offset
    for chunk in chunks:
        if chunk.end <= at:
            continue
        if chunk.start > at or want <= 0:
            break
        piece = chunk.table.slice(at - chunk.start, want)
        out.append(piece)
        want -= piece.num_rows
        at += piece.num_rows
    return out
