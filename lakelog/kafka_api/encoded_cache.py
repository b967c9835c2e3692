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

import pyarrow as pa
import pyarrow.compute as pc

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
        """The key of `rows` (TOPIC_SCHEMA, one partition, offsets ascending, at least one row)."""
        offsets, timestamps = rows.column("offset"), rows.column("timestamp").cast(pa.int64())
        sizes = [pc.sum(pc.binary_length(rows.column(name))).as_py() or 0 for name in ("key", "value")]
        return (topic, rows.column("partition")[0].as_py(), offsets[0].as_py(), offsets[-1].as_py(), rows.num_rows,
                compression, magic, timestamps[0].as_py(), timestamps[-1].as_py(), *sizes)

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


ENCODED = EncodedCache()  # the process's one cache: every connection's fetches share it
