"""Kafka's producer ids and lakelog's, both ways.

Kafka numbers an idempotent producer's batches per partition; lakelog numbers a producer's calls per topic.
Each (Kafka producer id, partition) is therefore its own lakelog producer id, in a range of its own (from
2^61; HTTP producers choose ids below it), and the per-partition rule is kept exactly. Going back, a Kafka
client knows a producer by that Kafka id, an HTTP producer by lakelog's own id, and an Idempotency-Key retry
(ids from 2^62) by none: it is not a producer.
"""

from __future__ import annotations

from lakelog.platform.records import IDEMPOTENCY_BASE

KAFKA_PRODUCERS = 1 << 61
PARTITION_BITS = 20


def lakelog_producer_id(kafka_producer_id: int, partition: int) -> int:
    return KAFKA_PRODUCERS + (kafka_producer_id << PARTITION_BITS) + partition


def kafka_producer_id(producer_id: int, partition: int) -> int | None:
    """The id a Kafka client knows a lakelog producer by: its own id for a Kafka producer of this partition,
    lakelog's id for an HTTP producer; None for the ids of Idempotency-Key retries (not producers)."""
    if producer_id >= IDEMPOTENCY_BASE:
        return None
    if producer_id >= KAFKA_PRODUCERS:
        offset = producer_id - KAFKA_PRODUCERS
        if offset & ((1 << PARTITION_BITS) - 1) != partition:
            return None
        return offset >> PARTITION_BITS
    return producer_id
