"""`__consumer_offsets` in Kafka's own record format, generated from the committed-offsets table.

Tools that read committed offsets from Kafka's internal topic (lag exporters, Burrow, the console
consumer's OffsetsMessageFormatter) decode its records themselves, so they are Kafka's, byte for byte:

- an offset commit: key version 1 (group, topic, partition), value version 3 (offset, leader epoch,
  metadata, commit timestamp);
- group metadata: key version 2 (group), value version 3 (protocol type, generation, protocol, leader,
  state timestamp, members), once per generation a group committed with. lakelog does not record members
  in the table, so the list is empty and protocol and leader are null.

A group's records go to partition abs(Java hashCode(group)) % 50, as Kafka places them. Offsets must
stay put as the table grows, so they come from the commit time, which the offset store keeps strictly
increasing: a commit stamped t ms is at t * 10^6 + twice its rank among the rows of its partition stamped
the same millisecond (ordered by group, topic, partition), plus one; the even slot before it holds the
group metadata record when the row starts a generation. Gaps are compaction's gaps to a consumer.

Pure: the table's rows in, records out (no I/O; `offsets_topic_log.py` reads the table).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

OFFSETS_TOPIC = "__consumer_offsets"
PARTITIONS = 50  # Kafka's offsets.topic.num.partitions default
SLOTS_PER_MS = 1_000_000  # offsets per commit millisecond: two per row (group metadata, offset commit)
OFFSET_KEY_VERSION, GROUP_KEY_VERSION = 1, 2
OFFSET_VALUE_VERSION, GROUP_VALUE_VERSION = 3, 3
NO_LEADER_EPOCH = -1
PROTOCOL_TYPE = "consumer"
GROUP_RECORD, OFFSET_RECORD = 0, 1  # a record's `kind`
# The columns rows come in (the offsets table's, with `committed` in ms) and records go out with.
ROW_COLUMNS = ("group", "topic", "partition", "offset", "metadata", "generation", "committed")


def java_hash(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, in 32-bit two's complement."""
    units = text.encode("utf-16-be")
    value = 0
    for (unit,) in struct.iter_unpack(">H", units):
        value = (31 * value + unit) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def partition_for(group: str, partitions: int = PARTITIONS) -> int:
    """Kafka's `Utils.abs(groupId.hashCode) % partitions` (Utils.abs maps Integer.MIN_VALUE to 0)."""
    code = java_hash(group)
    return (0 if code == -(1 << 31) else abs(code)) % partitions


# ---- encoding ---------------------------------------------------------------------------------------


def _string(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def _nullable_string(value: str | None) -> bytes:
    return struct.pack(">h", -1) if value is None else _string(value)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", OFFSET_KEY_VERSION) + _string(group) + _string(topic) + struct.pack(">i", partition)


def offset_value(offset: int, metadata: str | None, commit_timestamp_ms: int,
                 leader_epoch: int = NO_LEADER_EPOCH) -> bytes:
    return (struct.pack(">hqi", OFFSET_VALUE_VERSION, offset, leader_epoch) + _string(metadata or "")
            + struct.pack(">q", commit_timestamp_ms))


def group_key(group: str) -> bytes:
    return struct.pack(">h", GROUP_KEY_VERSION) + _string(group)


def group_value(generation: int, state_timestamp_ms: int, protocol_type: str = PROTOCOL_TYPE) -> bytes:
    """Version 3, without members (not recorded): protocol and leader null."""
    return (struct.pack(">h", GROUP_VALUE_VERSION) + _string(protocol_type) + struct.pack(">i", generation)
            + _nullable_string(None) + _nullable_string(None) + struct.pack(">qi", state_timestamp_ms, 0))


# ---- decoding (what a tool does; the tests and lakelog's own checks use it) -------------------------


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str | None:
        size = self.take(">h")
        if size < 0:
            return None
        self.at += size
        return self.data[self.at - size:self.at].decode()


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    reader = _Reader(data)
    version = reader.take(">h")
    if version in (0, 1):
        return OffsetKey(reader.string() or "", reader.string() or "", reader.take(">i"))
    if version == GROUP_KEY_VERSION:
        return GroupKey(reader.string() or "")
    raise ValueError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    """Versions 1 and 3 (lakelog writes 3)."""
    reader = _Reader(data)
    version = reader.take(">h")
    offset = reader.take(">q")
    epoch = reader.take(">i") if version >= 3 else NO_LEADER_EPOCH
    metadata = reader.string() or ""
    return OffsetValue(offset, epoch, metadata, reader.take(">q"))


def decode_group_generation(data: bytes) -> tuple[str, int]:
    """(protocol type, generation) of a group metadata value."""
    reader = _Reader(data)
    reader.take(">h")
    protocol_type = reader.string() or ""
    return protocol_type, reader.take(">i")


# ---- the records of each partition ------------------------------------------------------------------


def records(rows: pa.Table, partitions: int = PARTITIONS) -> pa.Table:
    """The topic's records from the table's rows (ROW_COLUMNS, `committed` in ms since the epoch), sorted
    by (out_partition, out_offset): the rows' columns plus `out_partition`, `out_offset` and `kind`
    (GROUP_RECORD or OFFSET_RECORD). Keys and values are encoded when read (`encode`)."""
    if rows.num_rows == 0:
        return _empty(rows)
    groups = rows.column("group").to_pylist()
    homes = {g: partition_for(g, partitions) for g in set(groups)}
    rows = rows.append_column("out_partition", pa.array([homes[g] for g in groups], pa.int32()))
    rows = rows.sort_by([("out_partition", "ascending"), ("committed", "ascending"), ("group", "ascending"),
                         ("topic", "ascending"), ("partition", "ascending")])
    home = rows.column("out_partition").to_numpy()
    stamp = rows.column("committed").to_numpy()
    first = np.r_[True, (home[1:] != home[:-1]) | (stamp[1:] != stamp[:-1])]  # each (partition, ms) run
    starts = np.maximum.accumulate(np.where(first, np.arange(len(home)), 0))
    slot = stamp.astype(np.int64) * SLOTS_PER_MS + 2 * (np.arange(len(home)) - starts)
    commits = rows.append_column("out_offset", pa.array(slot + 1)).append_column(
        "kind", pa.array(np.full(len(home), OFFSET_RECORD, np.int8)))
    starting = _generation_starts(rows)
    group_records = rows.filter(pa.array(starting)).append_column("out_offset", pa.array(slot[starting])).append_column(
        "kind", pa.array(np.full(int(starting.sum()), GROUP_RECORD, np.int8)))
    return pa.concat_tables([commits, group_records]).sort_by([("out_partition", "ascending"),
                                                               ("out_offset", "ascending")])


def _generation_starts(rows: pa.Table) -> np.ndarray:
    """Whether each row (in order) is its group's first with a new generation (-1: none, a commit from
    outside a membership, starts nothing)."""
    groups = rows.column("group").to_pylist()
    generations = rows.column("generation").fill_null(-1).to_pylist()
    seen: dict[str, int] = {}
    starting = np.zeros(len(groups), dtype=bool)
    for i, (group, generation) in enumerate(zip(groups, generations)):
        if generation >= 0 and seen.get(group) != generation:
            starting[i] = True
        if generation >= 0:
            seen[group] = generation
    return starting


def _empty(rows: pa.Table) -> pa.Table:
    return rows.append_column("out_partition", pa.array([], pa.int32())).append_column(
        "out_offset", pa.array([], pa.int64())).append_column("kind", pa.array([], pa.int8()))


def encode(records_table: pa.Table) -> tuple[list[bytes], list[bytes]]:
    """(keys, values) of the records, in order."""
    keys, values = [], []
    columns = [records_table.column(name).to_pylist()
               for name in ("kind", "group", "topic", "partition", "offset", "metadata", "generation", "committed")]
    for kind, group, topic, partition, offset, metadata, generation, committed in zip(*columns):
        if kind == GROUP_RECORD:
            keys.append(group_key(group))
            values.append(group_value(generation, committed))
        else:
            keys.append(offset_key(group, topic, partition))
            values.append(offset_value(offset, metadata, committed))
    return keys, values


ROW_SCHEMA = pa.schema([("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                        ("offset", pa.int64()), ("metadata", pa.string()), ("generation", pa.int32()),
                        ("committed", pa.int64())])


def in_ms(rows: pa.Table) -> pa.Table:
    """The table's rows (ROW_COLUMNS, as a Parquet reader found them: view types, a timestamp) in ROW_SCHEMA,
    `committed` in ms."""
    committed = rows.column("committed")
    if pa.types.is_timestamp(committed.type):
        committed = committed.cast(pa.timestamp("ms", tz="UTC"), safe=False).cast(pa.int64())
    rows = rows.select(list(ROW_COLUMNS)).set_column(ROW_COLUMNS.index("committed"), "committed", committed)
    return rows.cast(ROW_SCHEMA)
