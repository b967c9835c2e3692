"""Kafka's default partitioner, bit for bit: against kafka-python and Kafka's published vectors."""

from __future__ import annotations

import random

import mmh3
import numpy as np
import pytest
from kafka.partitioner.default import murmur2 as kafka_murmur2

from lakelog.platform.errors import UnknownTopicOrPartition
from lakelog.platform.partitioner import Partitioner, murmur2, partition_for_key

# Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java (testMurmur2):
# Java's signed int results.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def _signed(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


@pytest.mark.parametrize("key,expected", KAFKA_VECTORS.items())
def test_murmur2_matches_kafka_published_vectors(key: bytes, expected: int) -> None:
    assert _signed(murmur2(key)) == expected


def _random_keys(count: int) -> list[bytes]:
    rng = random.Random(20261121)
    keys = [b"", "ключ-🔑-鍵".encode(), b"\x00" * 5, bytes(range(256)) * 40]
    while len(keys) < count:
        kind = rng.random()
        if kind < 0.4:
            keys.append(rng.randbytes(rng.randint(0, 64)))
        elif kind < 0.7:
            text = "".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0x400, 0x4FF), rng.randint(0x4E00, 0x9FFF),
                                           rng.randint(0x1F600, 0x1F64F)])) for _ in range(rng.randint(1, 30)))
            keys.append(text.encode())
        else:
            keys.append(rng.randbytes(rng.randint(200, 1200)))
    return keys


def test_partition_matches_kafka_python_on_10000_random_keys() -> None:
    keys = _random_keys(12_000)
    partitioner = Partitioner("murmur2")
    kafka_hashes = [kafka_murmur2(k) & 0x7FFFFFFF for k in keys]
    for partitions in (1, 3, 8, 64, 1000):
        ours = partitioner.assign(keys, None, partitions)
        assert ours.tolist() == [h % partitions for h in kafka_hashes]
        small = [partitioner.assign(keys[i:i + 5], None, partitions).tolist() for i in range(0, 500, 5)]
        assert sum(small, []) == [h % partitions for h in kafka_hashes[:500]]  # the key-by-key path
    assert all(_signed(murmur2(k)) == _signed(kafka_murmur2(k) & 0xFFFFFFFF) for k in keys[:2000])


def test_murmur3_is_selectable() -> None:
    keys = _random_keys(500)
    ours = Partitioner("murmur3").assign(keys, None, 7).tolist()
    assert ours == [(mmh3.hash(k, signed=False) & 0x7FFFFFFF) % 7 for k in keys]
    assert ours != Partitioner("murmur2").assign(keys, None, 7).tolist()


def test_null_keys_are_sticky_per_batch_then_move_on() -> None:
    partitioner = Partitioner()
    batches = [partitioner.assign([None] * 50, None, 4) for _ in range(8)]
    for batch in batches:
        assert len(set(batch.tolist())) == 1  # one partition per batch
    chosen = [int(b[0]) for b in batches]
    assert chosen[:4] == sorted(set(chosen[:4]), key=chosen[:4].index) and set(chosen[:4]) == {0, 1, 2, 3}
    assert all(chosen[i] != chosen[i + 1] for i in range(len(chosen) - 1))


def test_explicit_partition_wins_and_out_of_range_is_an_error() -> None:
    partitioner = Partitioner()
    keys = [b"k1", None, b"k3"]
    assert partitioner.assign(keys, [2, 2, None], 3).tolist() == [2, 2, partition_for_key(b"k3", 3)]
    with pytest.raises(UnknownTopicOrPartition, match="out of range"):
        partitioner.assign(keys, [3, None, None], 3)
    with pytest.raises(UnknownTopicOrPartition):
        partitioner.assign(keys, [-1, None, None], 3)


def test_same_key_same_partition_across_instances() -> None:
    keys = _random_keys(300)
    first = Partitioner().assign(keys, None, 12)
    assert np.array_equal(first, Partitioner().assign(keys, None, 12))
