"""Kafka's default partitioner, bit for bit, and the murmur3 alternative.

Keyed records: `(murmur2(key) & 0x7fffffff) % partitions`, with murmur2 seeded
0x9747b28c as in Kafka's Java client, so a key lands on the same partition as
with Kafka. Null keys: sticky, one partition per batch, the next batch the
next partition. An explicit partition is used as given.
"""

from __future__ import annotations

import itertools
import struct
import threading
from typing import Callable, Sequence

import mmh3
import numpy as np
import pyarrow as pa

from lakelog.platform.errors import InvalidPartitions, UnknownTopicOrPartition

KAFKA_MURMUR2_SEED = 0x9747B28C


def murmur2(key: bytes) -> int:
    """Kafka's murmur2 (`Utils.murmur2`) as an unsigned 32-bit value (Java's int, reinterpreted).

    Plain Python: a short key hashes in a microsecond or two, while the C extensions on PyPI release
    the GIL on every call, which in a threaded server costs a thread switch per key (measured: 6,000
    calls/s beside one busy thread). Batches of many keys use `murmur2_array`.
    """
    length = len(key)
    h = (KAFKA_MURMUR2_SEED ^ length) & 0xFFFFFFFF
    body = length & ~3
    for (k,) in struct.iter_unpack("<I", key[:body]):  # little-endian words, as Kafka reads them
        k = (k * 0x5BD1E995) & 0xFFFFFFFF
        k ^= k >> 24
        h = ((h * 0x5BD1E995) & 0xFFFFFFFF) ^ ((k * 0x5BD1E995) & 0xFFFFFFFF)
    tail = length & 3
    if tail == 3:
        h ^= key[body + 2] << 16
    if tail >= 2:
        h ^= key[body + 1] << 8
    if tail:
        h = ((h ^ key[body]) * 0x5BD1E995) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0x5BD1E995) & 0xFFFFFFFF
    return h ^ (h >> 15)


def murmur3(key: bytes) -> int:
    return mmh3.hash(key, signed=False)


HASHES: dict[str, Callable[[bytes], int]] = {"murmur2": murmur2, "murmur3": murmur3}


def partition_for_key(key: bytes, partitions: int, hash_name: str = "murmur2") -> int:
    return (HASHES[hash_name](key) & 0x7FFFFFFF) % partitions


_M = np.uint32(0x5BD1E995)
SMALL_BATCH = 32  # below this, hashing key by key in C beats numpy's per-call overhead


def murmur2_array(keys: pa.Array) -> np.ndarray:
    """Kafka's murmur2 of every non-null key of a binary array, vectorized per key length.

    Keys of one length form a matrix, so the 4-byte mixing runs as numpy
    uint32 column operations (wrapping multiplication, as Java's int does).
    Null keys get 0; callers mask them.
    """
    keys = keys.cast(pa.binary())
    n = len(keys)
    out = np.zeros(n, dtype=np.uint32)
    if n == 0:
        return out
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=n + 1, offset=keys.offset * 4)
    data_buffer = keys.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    valid = ~np.asarray(keys.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    for length in np.unique(lengths[valid]):
        rows = np.flatnonzero(valid & (lengths == length))
        out[rows] = _murmur2_fixed(data, offsets[rows], int(length))
    return out


def _murmur2_fixed(data: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = np.full(len(starts), (KAFKA_MURMUR2_SEED ^ length) & 0xFFFFFFFF, dtype=np.uint32)
        if length:
            matrix = data[starts[:, None] + np.arange(length)]
        blocks = length // 4
        if blocks:
            words = np.ascontiguousarray(matrix[:, : blocks * 4]).view("<u4")
            for i in range(blocks):
                k = words[:, i] * _M
                k ^= k >> np.uint32(24)
                k *= _M
                h *= _M
                h ^= k
        tail = length % 4
        if tail:
            base = blocks * 4
            if tail == 3:
                h ^= matrix[:, base + 2].astype(np.uint32) << np.uint32(16)
            if tail >= 2:
                h ^= matrix[:, base + 1].astype(np.uint32) << np.uint32(8)
            h ^= matrix[:, base].astype(np.uint32)
            h *= _M
        h ^= h >> np.uint32(13)
        h *= _M
        h ^= h >> np.uint32(15)
    return h


class Partitioner:
    """Chooses partitions for one topic; thread-safe."""

    def __init__(self, hash_name: str = "murmur2") -> None:
        if hash_name not in HASHES:
            raise InvalidPartitions(f"unknown partitioner {hash_name!r}")
        self._hash_name = hash_name
        self._sticky = itertools.count()
        self._lock = threading.Lock()

    def next_sticky(self, partitions: int) -> int:
        with self._lock:
            return next(self._sticky) % partitions

    def assign(
        self,
        keys: pa.Array | pa.ChunkedArray | Sequence[bytes | None],
        explicit: Sequence[int | None] | None,
        partitions: int,
        topic: str = "",
    ) -> np.ndarray:
        """Partition per record: explicit if given, else by key hash, else the batch's sticky partition."""
        if explicit is not None:
            if None not in explicit:  # every record placed by the caller (a Kafka client's batch): no hashing,
                # and the range checked in bulk (a Kafka batch places thousands of records at once)
                placed = np.asarray(explicit, dtype=np.int64)
                _check_range(placed, partitions, topic)
                return placed.astype(np.int32)
            _check_range(np.array([p for p in explicit if p is not None], dtype=np.int64), partitions, topic)
        if len(keys) <= SMALL_BATCH:  # the common tiny request: key by key, no array work
            return self._assign_few(keys.to_pylist() if isinstance(keys, (pa.Array, pa.ChunkedArray)) else keys,
                                    explicit, partitions)
        if not isinstance(keys, (pa.Array, pa.ChunkedArray)):
            keys = pa.array(list(keys), pa.binary())
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        hashed = (murmur2_array(keys) & np.uint32(0x7FFFFFFF) if self._hash_name == "murmur2"
                  else self._hash_each(keys.to_pylist())) % np.uint32(partitions)
        result = hashed.astype(np.int32)
        null_keys = np.asarray(keys.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if explicit is not None:
            given = np.array([-1 if p is None else p for p in explicit], dtype=np.int64)
            chosen = given != -1
            result[chosen] = given[chosen]
            null_keys &= ~chosen
        if null_keys.any():
            result[null_keys] = self.next_sticky(partitions)
        return result

    def _assign_few(self, keys: Sequence[bytes | None], explicit: Sequence[int | None] | None,
                    partitions: int) -> np.ndarray:
        hash_ = HASHES[self._hash_name]
        sticky: int | None = None
        chosen = []
        for i, key in enumerate(keys):
            partition = None if explicit is None else explicit[i]
            if partition is None:
                if key is not None:
                    partition = (hash_(key) & 0x7FFFFFFF) % partitions
                else:
                    sticky = self.next_sticky(partitions) if sticky is None else sticky
                    partition = sticky
            chosen.append(partition)
        return np.array(chosen, dtype=np.int32)

    def _hash_each(self, keys: list[bytes | None]) -> np.ndarray:
        hash_ = HASHES[self._hash_name]
        return np.array([0 if k is None else hash_(k) & 0x7FFFFFFF for k in keys], dtype=np.uint32)


def _check_range(placed: np.ndarray, partitions: int, topic: str) -> None:
    wrong = np.flatnonzero((placed < 0) | (placed >= partitions))
    if wrong.size:
        raise UnknownTopicOrPartition(
            f"partition {int(placed[wrong[0]])} out of range: topic {topic!r} has partitions 0..{partitions - 1}"
        )
