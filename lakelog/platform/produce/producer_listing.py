"""The idempotent producers active on a partition, read from the log (Kafka's DescribeProducers).

The producer state a writer keeps (`producer_state.py`) is loaded per producer id on demand, so it does
not know every producer of a partition; the log does. Records carry producer_id, producer_epoch and
sequence, and file statistics on producer_id and timestamp skip the files without producers or older than
the expiration (Kafka's `producer.id.expiration.ms`: a producer silent that long is forgotten).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from lakelog.platform.segments.index import SegmentFile

PRODUCER_EXPIRATION_MS = 24 * 60 * 60 * 1000  # Kafka's producer.id.expiration.ms default
COLUMNS = ["offset", "timestamp", "producer_id", "producer_epoch", "sequence"]


@dataclass(frozen=True)
class ActiveProducer:
    producer_id: int  # lakelog's (the Kafka listener maps its own range back to Kafka's ids)
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    last_offset: int


class Log(Protocol):
    def segments(self, partition: int) -> list[SegmentFile]: ...

    def read_segment_table(self, segment: SegmentFile, columns: list[str] | None = None) -> pa.Table: ...


def latest_per_producer(rows: pa.Table, since_ms: int) -> list[ActiveProducer]:
    """Each producer's last record (by offset) among `rows` (COLUMNS), if it is at or after `since_ms`."""
    rows = rows.filter(pc.is_valid(rows.column("producer_id")))
    if rows.num_rows == 0:
        return []
    rows = rows.sort_by("offset")
    last: dict[int, ActiveProducer] = {}
    columns = [rows.column(name).to_pylist() for name in ("producer_id", "producer_epoch", "sequence", "offset")]
    stamps = rows.column("timestamp").cast(pa.int64()).to_pylist()
    for producer_id, epoch, sequence, offset, stamp in zip(*columns, stamps):
        last[producer_id] = ActiveProducer(producer_id, epoch, sequence, stamp, offset)
    return sorted((p for p in last.values() if p.last_timestamp_ms >= since_ms), key=lambda p: p.producer_id)


def partition_producers(log: Log, partition: int, now_ms: int,
                        expiration_ms: int = PRODUCER_EXPIRATION_MS) -> list[ActiveProducer]:
    """The producers that wrote `partition` within the expiration, with their last epoch and sequence."""
    since = now_ms - expiration_ms
    files = [s for s in log.segments(partition) if s.min_producer_id is not None and s.max_timestamp_ms >= since]
    if not files:
        return []
    return latest_per_producer(pa.concat_tables([log.read_segment_table(s, COLUMNS) for s in files]), since)
