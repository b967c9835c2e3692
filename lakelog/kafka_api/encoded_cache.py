"""Fetch answers already encoded: a partition's rows as Kafka record batches, kept for the next consumer.

Many consumers of one topic's tail (several groups, several apps) fetch the same offset ranges; Kafka serves
them from its page cache, lakelog from here, so the encoding is paid once. An entry's key is everything the
bytes depend on: the topic, partition, first and last offset, the number of rows (compaction may have removed
some), the codec and the message format; and, so that a topic deleted and created again under the same name
is never answered with the old one's bytes, the first and last timestamps and the key and value bytes in all.
Least recently used entries go first; the whole is bounded in bytes (`max_bytes`), and an answer larger than
a quarter of it is not kept. Any thread may call it: one lock, held for dictionary work only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Hashable

import numpy as np
import pyarrow as pa

DEFAULT_MAX_BYTES = 64 << 20


class EncodedCache:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @staticmethod
    def key(topic: str, rows: pa.Table, compression: int, magic: int) -> Hashable:
        """The key of `rows` (TOPIC_SCHEMA, one partition, offsets ascending, at least one row): read from
        the first and last chunks and the buffers' sizes, so that a lookup costs nothing per row."""
        offsets, timestamps = rows.column("offset"), rows.column("timestamp")
        sizes = [_data_bytes(rows.column(name)) for name in ("key", "value")]
        return (topic, _first(rows.column("partition")), _first(offsets), _last(offsets), rows.num_rows,
                compression, magic, _first(timestamps), _last(timestamps), *sizes)

    def get(self, key: Hashable) -> bytes | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return found

    def put(self, key: Hashable, encoded: bytes) -> None:
        if len(encoded) > self.max_bytes // 4:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= len(previous)
            self._entries[key] = encoded
            self._bytes += len(encoded)
            while self._bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= len(dropped)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)


def _first(column: pa.ChunkedArray) -> object:
    return next(chunk for chunk in column.chunks if len(chunk))[0].as_py()


def _last(column: pa.ChunkedArray) -> object:
    return next(chunk for chunk in reversed(column.chunks) if len(chunk))[-1].as_py()


def _data_bytes(column: pa.ChunkedArray) -> int:
    """A binary column's bytes of values, from each chunk's first and last value offsets (a slice's share
    of the data buffer, not the whole buffer)."""
    total = 0
    for chunk in column.chunks:
        bounds = chunk.buffers()[1] if len(chunk) and len(chunk.buffers()) > 2 else None
        if bounds is not None:
            ends = np.frombuffer(bounds, np.int64 if pa.types.is_large_binary(chunk.type) else np.int32)
            total += int(ends[chunk.offset + len(chunk)] - ends[chunk.offset])
    return total


ENCODED = EncodedCache()  # the process's one cache: every connection's fetches share it
