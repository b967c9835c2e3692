"""Segments: the data files of a topic, each sorted by partition and offset.

Two table layouts (`TableLayout`, recorded in the table as its partitioning):

- *partitioned* (layout 1, tables created before layout 2): the table is partitioned by `partition`;
  every file holds one partition's records, without the `partition` column. A flush writes one file
  per partition it touches (in parallel on object storage).
- *intake* (layout 2, every new table): the table is unpartitioned and every file has a `partition`
  column. A flush writes one file, whatever the partition count, sorted by partition and offset;
  partitions with few bytes share row groups, and the footer's key-value metadata says where each
  partition's rows are (its slice). Delta readers prune by the file statistics of `partition` and
  filter by it; lakelog indexes the slices (`slices_of`). Files written before the slices were put in
  the footer gave each partition its own row groups, and are sliced by their row-group statistics. The
  roll job later rewrites these shared files into one file per partition, which retention and
  compaction work on.

Writing: the log knows the add action (size, statistics) and the index entries of what it wrote without
reading it back. Reading: only the row groups that may hold the offsets asked for, chosen by their offset
statistics (among a slice's row groups), then cut to exactly those offsets (and to the slice's
partition). The log's fetch path, the Spark scan and the maintenance rewrites all read through here.
"""

from __future__ import annotations

import bisect
import itertools
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake.transaction import AddAction

from lakelog.platform.clock import now_ms
from lakelog.platform.segments.file_stats import file_stats, segment_of
from lakelog.platform.segments.index import SegmentFile
from lakelog.platform.storage import UPLOAD_CONNECTIONS, Storage
from lakelog.schemas import TOPIC_FILE_SCHEMA

ROW_GROUP_ROWS = 16_384
# A row group costs about 0.2 ms to write whatever it holds (13 ms for a flush of 64 partitions, a row group
# each): in an intake file, partitions with fewer bytes than this share row groups up to this size. A reader
# of one of them reads at most that much more; a partition with more has row groups of its own.
SHARED_ROW_GROUP_BYTES = 64 * 1024
# In an intake file's footer (key-value metadata): its slices, columnwise, JSON (row groups may hold several
# partitions: their statistics cannot tell them apart).
PACKED_SLICES_KEY = "lakelog.slices"
PACKED_SLICE_FIELDS = ("partition", "first_row", "num_records", "min_offset", "max_offset", "min_timestamp_ms",
                       "max_timestamp_ms", "min_producer_id", "max_producer_id")
_NO_PRODUCER_LOW, _NO_PRODUCER_HIGH = 2**63 - 1, -(2**63)  # fill a record without a producer id: never a bound
SLICE_STATS = ("partition", "offset", "timestamp", "producer_id")  # the row-group statistics slices are made of
# As Delta stores the records: timestamps in microseconds (Delta's timestamp type), the rest as given.
SEGMENT_FILE_SCHEMA = pa.schema([pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False)
                                 if f.name == "timestamp" else f for f in TOPIC_FILE_SCHEMA])
INTAKE_FILE_SCHEMA = pa.schema([pa.field("partition", pa.int32(), nullable=False), *SEGMENT_FILE_SCHEMA])
# Object stores take the segments of one flush in parallel: one round trip for all of them.
_UPLOADS = ThreadPoolExecutor(max_workers=UPLOAD_CONNECTIONS, thread_name_prefix="lakelog-segment-put")


class TableLayout(IntEnum):
    PARTITIONED = 1
    INTAKE = 2

    @classmethod
    def of(cls, partition_columns: Sequence[str]) -> TableLayout:
        return cls.PARTITIONED if list(partition_columns) == ["partition"] else cls.INTAKE

    @property
    def partition_by(self) -> list[str] | None:
        return ["partition"] if self is TableLayout.PARTITIONED else None

    def file_path(self, partition: int, name: str) -> str:
        """Where a data file of `partition` goes, relative to the table root."""
        return f"partition={partition}/{name}" if self is TableLayout.PARTITIONED else name

    def partition_values(self, partition: int) -> dict[str, str | None]:
        return {"partition": str(partition)} if self is TableLayout.PARTITIONED else {}


@dataclass(frozen=True)
class Written:
    """What a flush wrote: the commit's add actions, and the index entries of the files."""

    adds: list[AddAction]
    segments: list[SegmentFile]
    footer: pq.FileMetaData | None = None  # of a shared file: cached, so its reads need no footer GET


def data_file_name() -> str:
    """A new data file's name, as delta-rs names its files."""
    return f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"


def write_segments(storage: Storage, table_uri: str, table: pa.Table, runs: list[tuple[int, int, int]],
                   layout: TableLayout) -> Written:
    """The files of a flush: `table` (TOPIC_SCHEMA, sorted by partition) holds one (partition, start, end)
    run per partition. Layout 1: one file per run, uploaded in parallel; layout 2: one file for all."""
    if layout is TableLayout.INTAKE:
        return write_intake(storage, table_uri, table, runs)
    files = table.drop_columns(["partition"])
    slices = [(p, files.slice(start, end - start)) for p, start, end in runs]
    if storage.is_local or len(slices) == 1:
        adds = [write_segment(storage, table_uri, p, records, layout) for p, records in slices]
    else:
        adds = list(_UPLOADS.map(lambda job: write_segment(storage, table_uri, job[0], job[1], layout), slices))
    return Written(adds, [segment_of(a) for a in adds])


def write_segment(storage: Storage, table_uri: str, partition: int, records: pa.Table,
                  layout: TableLayout) -> AddAction:
    """A new data file of `partition` holding `records` (TOPIC_FILE_SCHEMA); in one write, so its size is
    known without asking the store."""
    if layout is TableLayout.INTAKE:
        records = records.add_column(0, INTAKE_FILE_SCHEMA.field("partition"),
                                     pa.array([partition] * records.num_rows, pa.int32()))
        schema = stored_schema(INTAKE_FILE_SCHEMA, records)
    else:
        schema = stored_schema(SEGMENT_FILE_SCHEMA, records)
    relative = layout.file_path(partition, data_file_name())
    data = _parquet_bytes([records.cast(schema)], schema)
    storage.write_bytes(f"{table_uri}/{relative}", data)
    return AddAction(relative, data.size, layout.partition_values(partition), now_ms(), True, file_stats(records))


def stored_schema(schema: pa.Schema, table: pa.Table) -> pa.Schema:
    """`schema`, and after it the table's columns beyond the log's own (a typed topic's `value_typed`)."""
    return pa.schema([*schema, *(f for f in table.schema if f.name not in schema.names)])


def write_intake(storage: Storage, table_uri: str, table: pa.Table, runs: list[tuple[int, int, int]]) -> Written:
    """One file for every partition of the flush, sorted by partition and offset: one PUT whatever the
    partition count. Small partitions share row groups (`SHARED_ROW_GROUP_BYTES`), so where each partition's
    rows are (its slice) is written in the footer's key-value metadata (`PACKED_SLICES_KEY`)."""
    relative = data_file_name()
    stored = table.cast(stored_schema(INTAKE_FILE_SCHEMA, table))
    packed = _packed_slices(stored, runs) if len(runs) > 1 else None
    data = _parquet_bytes(_row_group_pieces(stored, runs), stored.schema, intake=True,
                          key_values=None if packed is None else {PACKED_SLICES_KEY: json.dumps(packed)})
    storage.write_bytes(f"{table_uri}/{relative}", data)
    action = AddAction(relative, data.size, {}, now_ms(), True, file_stats(table))
    if packed is None:
        return Written([action], [segment_of(action)])
    footer = pq.read_metadata(pa.BufferReader(data))  # a small footer: the slices' sizes come from it
    return Written([action], _slices_of_packed(relative, action.modification_time, footer, packed), footer)


def _row_group_pieces(stored: pa.Table, runs: list[tuple[int, int, int]]) -> list[pa.Table]:
    """The flush cut into the pieces written as row groups: consecutive small runs together until they hold
    SHARED_ROW_GROUP_BYTES, a larger run on its own (its bytes estimated from the flush's mean record)."""
    per_row = stored.nbytes / max(stored.num_rows, 1)
    pieces: list[pa.Table] = []
    shared_from = None
    for _, start, end in runs:
        if (end - start) * per_row >= SHARED_ROW_GROUP_BYTES:
            if shared_from is not None:
                pieces.append(stored.slice(shared_from, start - shared_from))
                shared_from = None
            pieces.append(stored.slice(start, end - start))
            continue
        shared_from = start if shared_from is None else shared_from
        if (end - shared_from) * per_row >= SHARED_ROW_GROUP_BYTES:
            pieces.append(stored.slice(shared_from, end - shared_from))
            shared_from = None
    if shared_from is not None:
        pieces.append(stored.slice(shared_from))
    return pieces


def _packed_slices(stored: pa.Table, runs: list[tuple[int, int, int]]) -> dict[str, list]:
    """Each run's slice, columnwise (PACKED_SLICE_FIELDS): computed from the records, as the footer's
    row-group statistics would give them if every partition had its own row groups."""
    starts = np.array([start for _, start, _ in runs], dtype=np.int64)
    ends = np.array([end for _, _, end in runs], dtype=np.int64)
    offsets = stored.column("offset").to_numpy()
    micros = stored.column("timestamp").cast(pa.int64()).to_numpy()
    producers = stored.column("producer_id")
    low = pc.fill_null(producers, _NO_PRODUCER_LOW).to_numpy()
    high = pc.fill_null(producers, _NO_PRODUCER_HIGH).to_numpy()
    min_producer = np.minimum.reduceat(low, starts)
    max_producer = np.maximum.reduceat(high, starts)
    return {
        "partition": [p for p, _, _ in runs], "first_row": starts.tolist(), "num_records": (ends - starts).tolist(),
        "min_offset": offsets[starts].tolist(), "max_offset": offsets[ends - 1].tolist(),
        "min_timestamp_ms": (np.minimum.reduceat(micros, starts) // 1000).tolist(),
        "max_timestamp_ms": (np.maximum.reduceat(micros, starts) // 1000).tolist(),
        "min_producer_id": [None if v == _NO_PRODUCER_LOW else v for v in min_producer.tolist()],
        "max_producer_id": [None if v == _NO_PRODUCER_HIGH else v for v in max_producer.tolist()],
    }


def _parquet_bytes(pieces: list[pa.Table], schema: pa.Schema, intake: bool = False,
                   key_values: dict[str, str] | None = None) -> pa.Buffer:
    """Each piece in row groups of its own, of at most ROW_GROUP_ROWS rows. Intake files (small, rolled
    later) are written without dictionaries, and with statistics only of the columns slices and reads use:
    both cost more than they give there, and the footer (read by every other node) stays small."""
    sink = pa.BufferOutputStream()
    options: dict[str, Any] = {"use_dictionary": False, "write_statistics": list(SLICE_STATS)} if intake else {}
    with pq.ParquetWriter(sink, schema, compression="snappy", **options) as writer:
        for piece in pieces:  # each write ends its row groups: pieces never share one
            writer.write_table(piece, row_group_size=ROW_GROUP_ROWS)
        if key_values:
            writer.add_key_value_metadata(key_values)
    return sink.getvalue()


FOOTER_GUESS_BYTES = 64 * 1024  # a shared file's footer fits in one suffix GET unless it has very many columns


def read_footer(storage: Storage, uri: str) -> pq.FileMetaData:
    """A data file's footer in one request (two when it is larger than guessed): the file's last bytes,
    parsed from the end as any parquet reader does (the leading magic is only there to be found)."""
    tail = storage.read_tail(uri, FOOTER_GUESS_BYTES)
    length = int.from_bytes(tail[-8:-4], "little") + 8
    if length > len(tail):
        tail = storage.read_tail(uri, length)
    return pq.read_metadata(pa.BufferReader(b"PAR1" + tail[-length:]))


def slices_of(path: str, modification_time_ms: int, footer: pq.FileMetaData) -> list[SegmentFile] | None:
    """The index entries of a file holding several partitions: one per partition, from the slices its
    writer put in the footer, or in a file written before those, from the statistics of its row groups;
    None when these cannot tell (a file another tool wrote: see content_index.py)."""
    packed = (footer.metadata or {}).get(PACKED_SLICES_KEY.encode())
    if packed is None:
        return _slices_of_row_groups(path, modification_time_ms, footer)
    return _slices_of_packed(path, modification_time_ms, footer, json.loads(packed))


def _slices_of_packed(path: str, modification_time_ms: int, footer: pq.FileMetaData,
                      packed: dict[str, list]) -> list[SegmentFile]:
    """Each slice names the row groups its rows fall in, and counts its share of their compressed bytes."""
    groups = [footer.row_group(i) for i in range(footer.num_row_groups)]
    first_rows = list(itertools.accumulate((group.num_rows for group in groups), initial=0))
    sizes = [sum(group.column(j).total_compressed_size for j in range(group.num_columns)) for group in groups]
    slices = []
    for row in zip(*(packed[name] for name in PACKED_SLICE_FIELDS), strict=True):
        fields = dict(zip(PACKED_SLICE_FIELDS, row))
        start = fields.pop("first_row")
        end = start + fields["num_records"]
        among = range(bisect.bisect_right(first_rows, start) - 1, bisect.bisect_left(first_rows, end))
        size = sum(sizes[i] * (min(end, first_rows[i + 1]) - max(start, first_rows[i])) / groups[i].num_rows
                   for i in among)
        slices.append(SegmentFile(path=path, size_bytes=round(size), modification_time_ms=modification_time_ms,
                                  row_groups=tuple(among), **fields))
    return slices


def _slices_of_row_groups(path: str, modification_time_ms: int,
                          footer: pq.FileMetaData) -> list[SegmentFile] | None:
    """Slices of a file whose partitions each have their own row groups (written before packed files): from
    the row groups' statistics (a partition's row groups are consecutive). None unless each row group holds
    one partition's dense run of offsets, after that partition's previous one: statistics of another tool's
    row groups (partitions interleaved, offsets in any order) say nothing about where a partition starts."""
    columns: dict[str, int] = {}  # the statistics needed, by column index: reading each one costs
    for j in range(footer.num_columns if footer.num_row_groups else 0):
        name = footer.row_group(0).column(j).path_in_schema
        if name in SLICE_STATS:
            columns[name] = j
    slices: list[SegmentFile] = []
    for i in range(footer.num_row_groups):
        group = footer.row_group(i)
        stats: dict[str, Any] = {name: group.column(j).statistics for name, j in columns.items()}
        if not _one_dense_run(stats, group.num_rows, slices):
            return None
        partition = stats["partition"].min
        size = sum(group.column(j).total_compressed_size for j in range(group.num_columns))
        pids: Any = stats.get("producer_id")
        has_pids = pids is not None and pids.has_min_max
        entry = SegmentFile(
            path=path, partition=partition, size_bytes=size, num_records=group.num_rows,
            min_offset=stats["offset"].min, max_offset=stats["offset"].max,
            min_timestamp_ms=stats["timestamp"].min_raw // 1000, max_timestamp_ms=stats["timestamp"].max_raw // 1000,
            min_producer_id=pids.min if has_pids else None, max_producer_id=pids.max if has_pids else None,
            modification_time_ms=modification_time_ms, row_groups=(i,))
        if slices and slices[-1].partition == partition:
            entry = slices[-1].joined(entry)
            slices.pop()
        slices.append(entry)
    return slices


def _one_dense_run(stats: dict[str, Any], rows: int, before: list[SegmentFile]) -> bool:
    """A row group's statistics describe one partition's run: one partition, offsets dense, after that
    partition's earlier row groups."""
    partition, offset = stats.get("partition"), stats.get("offset")
    if any(s is None or not s.has_min_max for s in (partition, offset, stats.get("timestamp"))):
        return False
    assert partition is not None and offset is not None  # checked just above, in a form mypy cannot follow
    if partition.min != partition.max or offset.max - offset.min + 1 != rows:
        return False
    return all(s.max_offset < offset.min for s in before if s.partition == partition.min)


def row_groups_between(metadata: pq.FileMetaData, start: int, end: int | None = None,
                       among: Sequence[int] | None = None) -> list[int]:
    """Row groups (of `among`, default all) whose offsets may fall in [start, end) (end None: no upper
    bound)."""
    column = metadata.schema.names.index("offset")
    groups = []
    for i in range(metadata.num_row_groups) if among is None else among:
        stats = metadata.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max or (stats.max >= start and (end is None or stats.min < end)):
            groups.append(i)
    return groups


def read_offsets(source: Any, start: int, end: int | None = None, columns: list[str] | None = None,
                 metadata: pq.FileMetaData | None = None, row_groups: Sequence[int] | None = None,
                 partition: int | None = None) -> tuple[pa.Table, pq.FileMetaData]:
    """The records of [start, end) in an open data file of one partition, or of `partition`'s slice (its
    `row_groups`) of a file holding several, without a `partition` column; and the footer (to cache for
    the next read)."""
    parquet = pq.ParquetFile(source, metadata=metadata)
    # The log's own columns unless others are asked for (a typed topic's `value_typed`, left out of a file
    # written without it: the caller fills it in).
    stored = parquet.schema_arrow.names
    columns = [c for c in columns or TOPIC_FILE_SCHEMA.names if c in TOPIC_FILE_SCHEMA.names or c in stored]
    groups = row_groups_between(parquet.metadata, start, end, row_groups)
    if not groups:
        empty = TOPIC_FILE_SCHEMA.empty_table()
        return empty.select([c for c in columns if c in empty.column_names]), parquet.metadata
    table = _in_offset_order(_read_row_groups(parquet, groups, columns, _slice_partition(row_groups, partition)))
    offsets = table.column("offset")
    if table.num_rows and (offsets[0].as_py() < start or (end is not None and offsets[-1].as_py() >= end)):
        keep = pc.greater_equal(offsets, start)
        if end is not None:
            keep = pc.and_(keep, pc.less(offsets, end))
        table = table.filter(keep)
    return table, parquet.metadata


def read_file(source: Any, columns: list[str] | None = None, row_groups: Sequence[int] | None = None,
              partition: int | None = None, bounds: tuple[int, int] | None = None) -> pa.Table:
    """A whole data file, or `partition`'s slice (its `row_groups`) of a file holding several, in offset
    order and TOPIC_FILE_SCHEMA's types (delta-rs and lakelog store timestamps in microseconds; the schema
    says milliseconds). `bounds`: only the offsets from the first to the last given (an entry by content
    is one run of its partition's offsets; the file may hold others)."""
    read = columns if columns is None or bounds is None or "offset" in columns else [*columns, "offset"]
    if row_groups is None:
        table = _without_partition(pq.read_table(source, columns=read))
    else:
        table = _read_row_groups(pq.ParquetFile(source), row_groups, read, _slice_partition(row_groups, partition))
    table = _in_offset_order(table)
    if bounds is not None and table.num_rows:
        offsets = table.column("offset")
        if offsets[0].as_py() < bounds[0] or offsets[-1].as_py() > bounds[1]:
            table = table.filter(pc.and_(pc.greater_equal(offsets, bounds[0]), pc.less_equal(offsets, bounds[1])))
        if read is not columns:
            table = table.drop_columns(["offset"])
    wanted = pa.schema([TOPIC_FILE_SCHEMA.field(name) if name in TOPIC_FILE_SCHEMA.names else table.schema.field(name)
                        for name in table.column_names])  # other columns (`value_typed`) as stored
    return table if table.schema == wanted else table.select(wanted.names).cast(wanted)


def _read_row_groups(parquet: pq.ParquetFile, groups: Sequence[int], columns: list[str] | None,
                     partition: int | None) -> pa.Table:
    """Row groups of a file, cut to `partition`'s rows when given (a row group may hold several)."""
    # One thread per read: a slice's row groups are small, and a fetch reads several files at once.
    if partition is None:
        return _without_partition(parquet.read_row_groups(list(groups), columns=columns, use_threads=False))
    wanted = None if columns is None else [*dict.fromkeys([*columns, "partition"])]
    table = parquet.read_row_groups(list(groups), columns=wanted, use_threads=False)
    ours = pc.equal(table.column("partition"), partition)
    return _without_partition(table if pc.all(ours).as_py() else table.filter(ours))


def _in_offset_order(table: pa.Table) -> pa.Table:
    """Rows in offset order: lakelog writes them so; another tool's rewrite (a Z-ORDER) may not."""
    if table.num_rows < 2 or "offset" not in table.column_names:
        return table
    offsets = table.column("offset").to_numpy()
    return table if bool(np.all(offsets[1:] > offsets[:-1])) else table.sort_by("offset")


def _slice_partition(row_groups: Sequence[int] | None, partition: int | None) -> int | None:
    """The partition to cut a read to: a slice's (a slice's row groups may hold other partitions too)."""
    if row_groups is None:
        return None
    if partition is None:
        raise ValueError("a slice of a file holding several partitions is read with its partition")
    return partition


def _without_partition(table: pa.Table) -> pa.Table:
    """Readers of one partition's records get them without the column (layout 2 files have it)."""
    return table.drop_columns(["partition"]) if "partition" in table.column_names else table
