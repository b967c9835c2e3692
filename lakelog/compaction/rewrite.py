"""Rewriting a run of consecutive files of one partition: merge (roll) or compact.

Output files keep offsets and order. Their offset statistics span the whole
input run (the first output starts at the run's first offset, the last ends
at its last offset), so the segment index stays contiguous and the log start
offset never moves because compaction dropped the first record of the log.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakelog.platform.segments.file_stats import file_stats, iso_ms
from lakelog.platform.segments.index import SegmentFile
from lakelog.platform.segments.segment import INTAKE_FILE_SCHEMA, TableLayout, data_file_name, read_file
from lakelog.platform.storage import Storage
from lakelog.schemas import TOPIC_FILE_SCHEMA

# Files written by a roll or a compaction are finished segments; rolls never merge them again.
SEGMENT_MARK = "seg-"
  # plan.is_segment recognises it


# Row groups small enough that a fetch (hundreds of records) reads one or two of them.
ROW_GROUP_BYTES = 1 << 20
MIN_ROW_GROUP_ROWS = 1_024
MAX_ROW_GROUP_ROWS = 16_384


@dataclass(frozen=True)
class WrittenFile:
    """A new data file, ready to become a Delta add action."""

    path: str  # relative to the table root
    partition: int
    size_bytes: int
    num_records: int
    stats: str  # Delta statistics JSON
    modification_time_ms: int


@dataclass(frozen=True)
class RewriteResult:
    partition: int
    inputs: tuple[str, ...]  # paths of the files replaced
    outputs: tuple[WrittenFile, ...]
    records_in: int
    records_out: int
    bytes_in: int

    @property
    def changed(self) -> bool:
        return bool(self.inputs)


def merge_segments(storage: Storage, table_uri: str, layout: TableLayout, partition: int,
                   inputs: Sequence[SegmentFile], target_bytes: int, finished: bool = True) -> RewriteResult:
    """Concatenate the files, in offset order, into one file (segment roll).

    The planner closes a group once it holds about `target_bytes`, so one output
    per group is one segment; small inputs carry per-file overhead, so the
    output is usually smaller than the sum of the inputs. An output not `finished` (the roll of
    shared files' slices) is a plain small file that a later roll merges again.
    """
    ordered = sorted(inputs, key=lambda f: f.min_offset)
    tables = (_read(storage, table_uri, f) for f in ordered)
    return _write_run(storage, table_uri, layout, partition, ordered, tables, target_bytes, one_file=True,
                      finished=finished)


def compact_segments(storage: Storage, table_uri: str, layout: TableLayout, partition: int,
                     inputs: Sequence[SegmentFile], target_bytes: int, delete_retention_ms: int,
                     now_ms: int | None = None) -> RewriteResult:
    """Keep the latest record per key; drop tombstones older than delete.retention.ms.

    Records without a key are kept (they have nothing to be superseded by).
    Returns an unchanged result (no inputs, no outputs) when nothing would be dropped.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    ordered = sorted(inputs, key=lambda f: f.min_offset)
    latest = _latest_offsets(storage, table_uri, ordered)
    horizon = now_ms - delete_retention_ms
    kept_total, seen_total = 0, 0
    for f in ordered:  # a cheap first pass: would anything be dropped at all?
        table = _read(storage, table_uri, f, ["offset", "key", "timestamp", "value"])
        kept_total += _keep_mask(table, latest, horizon).true_count
        seen_total += table.num_rows
    if kept_total == seen_total:
        return RewriteResult(partition, (), (), seen_total, seen_total, 0)
    tables = (_filter(_read(storage, table_uri, f), latest, horizon) for f in ordered)
    return _write_run(storage, table_uri, layout, partition, ordered, tables, target_bytes)


def _latest_offsets(storage: Storage, table_uri: str, files: Sequence[SegmentFile]) -> np.ndarray:
    """Sorted offsets of the last record of each key in the run."""
    pieces = [_read(storage, table_uri, f, ["offset", "key"]) for f in files]
    empty = {"offset": pa.array([], pa.int64()), "key": pa.array([], pa.binary())}
    keys = pa.concat_tables(pieces, promote_options="permissive") if pieces else pa.table(empty)
    keyed = keys.filter(pc.is_valid(keys.column("key")))
    if keyed.num_rows == 0:
        return np.empty(0, dtype=np.int64)
    latest = keyed.group_by("key").aggregate([("offset", "max")]).column("offset_max")
    return np.sort(latest.to_numpy())


def _keep_mask(table: pa.Table, latest: np.ndarray, horizon_ms: int) -> pa.BooleanArray:
    offsets = table.column("offset").to_numpy()
    at = np.searchsorted(latest, offsets)
    is_latest = (at < len(latest)) & (latest[np.minimum(at, len(latest) - 1)] == offsets) if len(latest) else \
        np.zeros(len(offsets), dtype=bool)
    no_key = pc.is_null(table.column("key")).to_numpy(zero_copy_only=False)
    tombstone = pc.is_null(table.column("value")).to_numpy(zero_copy_only=False)
    old = table.column("timestamp").cast(pa.int64()).to_numpy() < horizon_ms
    keep = (is_latest | no_key) & ~(tombstone & old & ~no_key)
    return pa.array(keep)


def _filter(table: pa.Table, latest: np.ndarray, horizon_ms: int) -> pa.Table:
    return table.filter(_keep_mask(table, latest, horizon_ms))


def _read(storage: Storage, table_uri: str, segment: SegmentFile, columns: list[str] | None = None) -> pa.Table:
    with storage.open_input(f"{table_uri}/{segment.path}") as source:
        # bounds: an entry by content is one run of its partition's offsets in a file that may hold others
        return read_file(source, columns, segment.row_groups, segment.partition,
                         (segment.min_offset, segment.max_offset))


def _write_run(storage: Storage, table_uri: str, layout: TableLayout, partition: int,
               inputs: Sequence[SegmentFile], tables: Iterator[pa.Table], target_bytes: int,
               one_file: bool = False, finished: bool = True) -> RewriteResult:
    bytes_in = sum(f.size_bytes for f in inputs)
    records_in = sum(f.num_records for f in inputs)
    # Size outputs by records: the inputs' bytes per record predict the output's.
    per_record = max(bytes_in / max(records_in, 1), 1.0)
    target_rows = max(records_in, 1) if one_file else max(int(target_bytes / per_record), 1)
    row_group = int(min(max(ROW_GROUP_BYTES / per_record, MIN_ROW_GROUP_ROWS), MAX_ROW_GROUP_ROWS))
    chunks = list(_chunks(tables, target_rows))
    if not chunks:  # everything dropped: one empty file keeps the offset range covered
        chunks = [TOPIC_FILE_SCHEMA.empty_table()]
    first, last = inputs[0], inputs[-1]
    outputs = []
    for i, chunk in enumerate(chunks):
        lo = first.min_offset if i == 0 else int(chunk.column("offset")[0].as_py())
        hi = last.max_offset if i == len(chunks) - 1 else int(chunk.column("offset")[-1].as_py())
        name = f"{lo:020d}-{SEGMENT_MARK}{uuid.uuid4().hex[:12]}.parquet" if finished else data_file_name()
        outputs.append(_write_file(storage, table_uri, layout.file_path(partition, name), layout, partition, chunk,
                                   (lo, hi), row_group, (first, last)))
    return RewriteResult(partition, tuple(f.path for f in inputs), tuple(outputs), records_in,
                         sum(o.num_records for o in outputs), bytes_in)


def _chunks(tables: Iterator[pa.Table], target_rows: int) -> Iterator[pa.Table]:
    pending: list[pa.Table] = []
    rows = 0
    for table in tables:
        while table.num_rows:
            take = min(table.num_rows, target_rows - rows)
            pending.append(table.slice(0, take))
            rows += take
            table = table.slice(take)
            if rows >= target_rows:
                yield pa.concat_tables(pending, promote_options="permissive")
                pending, rows = [], 0
    if rows:
        yield pa.concat_tables(pending, promote_options="permissive")


def _write_file(storage: Storage, table_uri: str, relative: str, layout: TableLayout, partition: int,
                table: pa.Table, bounds: tuple[int, int], row_group: int,
                ends: tuple[SegmentFile, SegmentFile]) -> WrittenFile:
    uri = f"{table_uri}/{relative}"
    if "/" in relative:
        storage.makedirs(uri.rsplit("/", 1)[0])
    stats = _bounded_stats(table, *bounds, *ends)
    if layout is TableLayout.INTAKE:  # the column a Delta reader prunes by; statistics name it
        table = table.add_column(0, INTAKE_FILE_SCHEMA.field("partition"), pa.array([partition] * table.num_rows,
                                                                                   pa.int32()))
        stats = json.loads(stats)
        stats["minValues"]["partition"] = stats["maxValues"]["partition"] = partition
        stats["nullCount"]["partition"] = 0
        stats = json.dumps(stats)
    with storage.arrow_fs.open_output_stream(storage.fs_path(uri)) as sink:
        pq.write_table(table, sink, row_group_size=row_group, compression="snappy")
    size = storage.arrow_fs.get_file_info(storage.fs_path(uri)).size
    return WrittenFile(relative, partition, size, table.num_rows, stats, int(time.time() * 1000))


def _bounded_stats(table: pa.Table, lo: int, hi: int, first: SegmentFile, last: SegmentFile) -> str:
    """File stats whose offset bounds cover [lo, hi]: bounds, as Delta allows, not exact values."""
    stats = json.loads(file_stats(table))
    stats["minValues"]["offset"] = lo
    stats["maxValues"]["offset"] = hi
    if "timestamp" not in stats["minValues"]:  # an empty placeholder file: keep the inputs' time range
        stats["minValues"]["timestamp"] = iso_ms(first.min_timestamp_ms)
        stats["maxValues"]["timestamp"] = iso_ms(last.max_timestamp_ms)
    return json.dumps(stats)
