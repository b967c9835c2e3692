"""What crosses the share coordinator's boundary: acknowledgements in, deliveries and heartbeat answers out."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from lakelog.platform.errors import LakelogError
from lakelog.platform.records import TopicPartition
from lakelog.platform.share.partition import Acquired


@dataclass(frozen=True)
class Ack:
    """One acknowledgement batch: a type per offset from `first` to `last`, or one for them all."""

    topic: str
    partition: int
    first: int
    last: int
    types: tuple[int, ...]


@dataclass
class Delivery:
    """One partition's answer to a fetch: the records read (a superset of those acquired) and what was
    acquired, or the error that kept it from being read."""

    records: pa.Table | None = None
    acquired: list[Acquired] = field(default_factory=list)
    error: LakelogError | None = None


@dataclass(frozen=True)
class HeartbeatAnswer:
    member_id: str
    epoch: int
    assignment: frozenset[TopicPartition] | None  # None: unchanged since the last answer


def only_acquired(records: pa.Table, acquired: list[Acquired]) -> pa.Table:
    """The rows of the acquired offsets (a read holds others' records too)."""
    if not acquired or records.num_rows == 0:
        return records.slice(0, 0)
    offsets = records.column("offset")
    first, last = int(offsets[0].as_py()), int(offsets[-1].as_py())
    if len(acquired) == 1 and acquired[0].first_offset <= first and acquired[0].last_offset >= last:
        return records  # all of the read (the usual case: new records for one member)
    mask = None
    for run in acquired:
        inside = pc.and_(pc.greater_equal(offsets, run.first_offset), pc.less_equal(offsets, run.last_offset))
        mask = inside if mask is None else pc.or_(mask, inside)
    return records.filter(mask)
