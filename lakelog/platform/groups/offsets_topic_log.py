"""`__consumer_offsets` as a read-only log: the records `offsets_topic.py` generates from the committed-offsets
table, read by partition and offset as a Kafka consumer reads a topic.

Every node reads the same table (the groups of every coordinator are in it), so any node serves the topic.
The table is append-only between group deletions: each refresh reads only the data files added since the
one before (a deletion rewrites files, and only those are read again), at most every `refresh_s`, and
regenerates the records from the rows in memory.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakelog.platform.delta.control_table import open_control_table
from lakelog.platform.groups import offsets_topic
from lakelog.platform.layout import OFFSETS_TABLE
from lakelog.platform.storage import Storage
from lakelog.schemas import CONSUMER_OFFSETS_SCHEMA

REFRESH_S = 0.2
RECORD_OVERHEAD_BYTES = 20  # a record's framing in a v2 batch, roughly: for the byte budget only
BATCH_SCHEMA = pa.schema([("offset", pa.int64()), ("timestamp", pa.int64()), ("key", pa.binary()),
                          ("value", pa.binary()), ("headers", pa.list_(pa.struct([("key", pa.string()),
                                                                                  ("value", pa.binary())])))])


@dataclass(frozen=True)
class _Partition:
    offsets: np.ndarray  # out_offset, ascending
    records: pa.Table  # offsets_topic.records' columns, in the same order


class OffsetsTopicLog:
    def __init__(self, storage: Storage, refresh_s: float = REFRESH_S) -> None:
        self._storage = storage
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._dt = open_control_table(storage, OFFSETS_TABLE, CONSUMER_OFFSETS_SCHEMA)
        self._version = -1
        self._files: dict[str, pa.Table] = {}  # the rows of each data file, by URI
        self._partitions: dict[int, _Partition] = {}
        self._checked = -1e9

    def refresh(self) -> None:
        """Regenerate the records if the table changed (checked at most every `refresh_s`)."""
        with self._lock:
            if time.monotonic() - self._checked < self._refresh_s:
                return
            self._checked = time.monotonic()
            self._dt.update_incremental()
            if self._dt.version() == self._version:
                return
            uris = set(self._dt.file_uris()) if self._dt.version() > 0 else set()
            self._files = {uri: self._files[uri] if uri in self._files else self._read(uri) for uri in uris}
            self._version = self._dt.version()
            self._partitions = _by_partition(self._rows())

    def _read(self, uri: str) -> pa.Table:
        with self._storage.open_input(uri) as source:
            table = pq.read_table(source, pre_buffer=False, use_threads=False)
        return offsets_topic.in_ms(table)

    def _rows(self) -> pa.Table:
        if not self._files:
            return offsets_topic.ROW_SCHEMA.empty_table()
        return pa.concat_tables(list(self._files.values()), promote_options="permissive")

    def _partition(self, partition: int) -> _Partition | None:
        self.refresh()
        with self._lock:
            return self._partitions.get(partition)

    def end_offset(self, partition: int) -> int:
        """One past the last record (0 while the partition is empty); the log start is always 0."""
        found = self._partition(partition)
        return 0 if found is None or not len(found.offsets) else int(found.offsets[-1]) + 1

    def offset_for_time(self, partition: int, timestamp_ms: int) -> int | None:
        """The first record committed at or after `timestamp_ms` (None: none is)."""
        found = self._partition(partition)
        if found is None:
            return None
        stamps = found.records.column("committed").to_numpy()
        at = int(np.searchsorted(stamps, timestamp_ms))  # records are in commit-time order
        return int(found.offsets[at]) if at < len(stamps) else None

    def read(self, partition: int, offset: int, max_bytes: int) -> pa.Table:
        """Records from the first at or after `offset` (BATCH_SCHEMA), within `max_bytes` but at least one."""
        found = self._partition(partition)
        if found is None:
            return BATCH_SCHEMA.empty_table()
        at = int(np.searchsorted(found.offsets, offset))
        chosen = found.records.slice(at, max(_fitting(found.records, at, max_bytes), 1))
        keys, values = offsets_topic.encode(chosen)
        return pa.table({"offset": chosen.column("out_offset"), "timestamp": chosen.column("committed"),
                         "key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
                         "headers": pa.nulls(chosen.num_rows, BATCH_SCHEMA.field("headers").type)},
                        schema=BATCH_SCHEMA)


def _fitting(records: pa.Table, at: int, max_bytes: int) -> int:
    """How many records from `at` fit in `max_bytes`, estimated from the names and metadata they carry."""
    window = records.slice(at, max(max_bytes // RECORD_OVERHEAD_BYTES, 1))
    if window.num_rows == 0:
        return 0
    sizes = pc.add(pc.add(pc.binary_length(window.column("group")).fill_null(0),
                          pc.binary_length(window.column("topic")).fill_null(0)),
                   pc.binary_length(window.column("metadata")).fill_null(0)).to_numpy(zero_copy_only=False)
    total = np.cumsum(sizes + 3 * RECORD_OVERHEAD_BYTES)
    return int(np.searchsorted(total, max_bytes, side="right"))


def _by_partition(rows: pa.Table) -> dict[int, _Partition]:
    generated = offsets_topic.records(rows)
    homes = generated.column("out_partition").to_numpy()
    found: dict[int, _Partition] = {}
    for partition in np.unique(homes):
        chosen = generated.filter(pa.array(homes == partition))
        found[int(partition)] = _Partition(chosen.column("out_offset").to_numpy(), chosen)
    return found
