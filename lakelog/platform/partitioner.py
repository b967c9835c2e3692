"""Kafka's default partitioner, bit for bit, and the murmur3 alternative.

Keyed records: `(murmur2(key) & 0x7fffffff) % partitions`, with murmur2 seeded
0x9747b28c as in Kafka's Java client, so a key lands on the same partition as
with Kafka. Null keys: sticky, one partition per batch, the next batch the
next partition. An explicit partition is used as given.
"""

from __future__ import annotations

import itertools
import threading
from typing import Callable, Sequence

import mmh3
import numpy as np
from murmurhash2 import murmurhash2

from lakelog.platform.errors import InvalidPartitions, UnknownTopicOrPartition

KAFKA_MURMUR2_SEED = 0x9747B28C


def murmur2(key: bytes) -> int:
    """Kafka's murmur2 as an unsigned 32-bit value (Java's int, reinterpreted)."""
    return murmurhash2(key, KAFKA_MURMUR2_SEED)


def murmur3(key: bytes) -> int:
    return mmh3.hash(key, signed=False)


HASHES: dict[str, Callable[[bytes], int]] = {"murmur2": murmur2, "murmur3": murmur3}


def partition_for_key(key: bytes, partitions: int, hash_name: str = "murmur2") -> int:
    return (HASHES[hash_name](key) & 0x7FFFFFFF) % partitions


class Partitioner:
    """Chooses partitions for one topic; thread-safe."""

    def __init__(self, hash_name: str = "murmur2") -> None:
        if hash_name not in HASHES:
            raise InvalidPartitions(f"unknown partitioner {hash_name!r}")
        self._hash = HASHES[hash_name]
        self._sticky = itertools.count()
        self._lock = threading.Lock()

    def next_sticky(self, partitions: int) -> int:
        with self._lock:
            return next(self._sticky) % partitions

    def assign(
        self,
        keys: Sequence[bytes | None],
        explicit: Sequence[int | None] | None,
        partitions: int,
        topic: str = "",
    ) -> np.ndarray:
        """Partition per record: explicit if given, else by key hash, else the batch's sticky partition."""
        result = np.empty(len(keys), dtype=np.int32)
        sticky: int | None = None
        hash_ = self._hash
        for i, key in enumerate(keys):
            chosen = explicit[i] if explicit is not None else None
            if chosen is not None:
                if not 0 <= chosen < partitions:
                    raise UnknownTopicOrPartition(
                        f"partition {chosen} out of range: topic {topic!r} has partitions 0..{partitions - 1}"
                    )
                result[i] = chosen
            elif key is not None:
                result[i] = (hash_(key) & 0x7FFFFFFF) % partitions
            else:
                if sticky is None:
                    sticky = self.next_sticky(partitions)
                result[i] = sticky
        return result
