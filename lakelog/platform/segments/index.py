"""The segment index: Delta's per-file statistics, read from the snapshot.

Each data file holds one partition's records sorted by offset; its min/max
`offset` and `timestamp` stats make the offset index and the time index. A
file holding several partitions (layout 2, see segment.py) is indexed by its
slices: one entry per partition, naming the partition's row groups. No side
files: the index is rebuilt from the snapshot's add actions (and the footers of
shared files) whenever the table version changes.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakelog.platform.clock import to_ms


@dataclass(frozen=True, slots=True)
class SegmentFile:
    path: str  # relative to the table root
    partition: int
    size_bytes: int
    num_records: int
    min_offset: int
    max_offset: int
    min_timestamp_ms: int
    max_timestamp_ms: int
    min_producer_id: int | None = None
    max_producer_id: int | None = None
    modification_time_ms: int = 0
    # In a file holding several partitions (layout 2, before the roll): this partition's row groups.
    row_groups: tuple[int, ...] | None = None
    # Indexed by its content (a file another tool wrote, see content_index.py): one run of the partition's
    # offsets, its rows in any order among the row groups; holes next to it are compaction's (index.py).
    by_content: bool = False

    @property
    def shared(self) -> bool:
        """Part of a file holding other partitions too: only a rewrite of the whole file removes it."""
        return self.row_groups is not None

    def joined(self, later: SegmentFile) -> SegmentFile:
        """This slice and the next row groups of the same partition in the same file."""
        def low(a: int | None, b: int | None) -> int | None:
            return b if a is None else a if b is None else min(a, b)

        def high(a: int | None, b: int | None) -> int | None:
            return b if a is None else a if b is None else max(a, b)

        return replace(self, size_bytes=self.size_bytes + later.size_bytes,
                       num_records=self.num_records + later.num_records, max_offset=later.max_offset,
                       min_timestamp_ms=min(self.min_timestamp_ms, later.min_timestamp_ms),
                       max_timestamp_ms=max(self.max_timestamp_ms, later.max_timestamp_ms),
                       min_producer_id=low(self.min_producer_id, later.min_producer_id),
                       max_producer_id=high(self.max_producer_id, later.max_producer_id),
                       row_groups=(*(self.row_groups or ()), *(later.row_groups or ())))

    def may_hold_producer(self, producer_id: int) -> bool:
        if self.min_producer_id is None or self.max_producer_id is None:
            return False
        return self.min_producer_id <= producer_id <= self.max_producer_id


@dataclass
class PartitionIndex:
    files: list[SegmentFile] = field(default_factory=list)  # sorted by min_offset
    _starts: list[int] = field(default_factory=list)

    def add(self, segment: SegmentFile) -> None:
        at = bisect.bisect_right(self._starts, segment.min_offset)
        self.files.insert(at, segment)
        self._starts.insert(at, segment.min_offset)

    @property
    def log_start_offset(self) -> int | None:
        return self.files[0].min_offset if self.files else None

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    def files_from(self, offset: int) -> Iterator[SegmentFile]:
        """Files that may hold offsets >= `offset`, in offset order."""
        at = max(bisect.bisect_right(self._starts, offset) - 1, 0)
        for segment in self.files[at:]:
            if segment.max_offset >= offset:
                yield segment


class SegmentIndex:
    def __init__(self, segments: Iterable[SegmentFile] = ()) -> None:
        self.partitions: dict[int, PartitionIndex] = {}
        for segment in sorted(segments, key=lambda s: (s.partition, s.min_offset)):
            self.partition(segment.partition).add(segment)

    def partition(self, partition: int) -> PartitionIndex:
        index = self.partitions.get(partition)
        if index is None:
            index = self.partitions[partition] = PartitionIndex()
        return index

    def add(self, segment: SegmentFile) -> None:
        self.partition(segment.partition).add(segment)

    @classmethod
    def from_add_actions(cls, actions: pa.Table,
                         shared: Mapping[str, Sequence[SegmentFile]] | None = None) -> SegmentIndex:
        """Build from `DeltaTable.get_add_actions(flatten=True)`. A file holding several partitions (layout 2)
        is indexed by its slices, and a file another tool wrote by its content, which the caller read
        (`shared`, by path; see content_index.files_needing_slices)."""
        columns = set(actions.column_names)
        if actions.num_rows == 0:
            return cls()
        col = _column_reader(actions)
        partitions = col("partition.partition") if "partition.partition" in columns else col("min.partition")
        rows = zip(
            col("path"), partitions, col("max.partition"), col("size_bytes"), col("num_records"),
            col("min.offset"), col("max.offset"), col("min.timestamp"), col("max.timestamp"),
            col("min.producer_id"), col("max.producer_id"), col("modification_time"),
        )
        segments: list[SegmentFile] = []
        for path, part, last_part, size, count, lo, hi, tlo, thi, plo, phi, mtime in rows:
            if shared and path in shared:  # slices, or entries by content (content_index.files_needing_slices)
                segments += shared[path]
                continue
            if lo is None or hi is None or part is None:
                continue  # a file without stats is not ours; nothing to index
            if last_part is not None and last_part != part:
                segments += (shared or {}).get(path, ())
                continue
            segments.append(SegmentFile(
                path=path, partition=int(part), size_bytes=int(size), num_records=int(count or 0),
                min_offset=int(lo), max_offset=int(hi),
                min_timestamp_ms=int(tlo or 0), max_timestamp_ms=int(thi or 0),
                min_producer_id=plo, max_producer_id=phi, modification_time_ms=to_ms(mtime),
            ))
        return cls(joined_runs(segments))


def joined_runs(segments: Iterable[SegmentFile]) -> list[SegmentFile]:
    """Entries by content (another tool's files) made to tile a partition as lakelog's files do: runs of one
    file next to each other are one entry, and a hole next to such an entry is closed by it. A rewrite by
    another tool keeps the records, not the bounds a compacted file of lakelog's stated (a compacted range's
    first offset may hold no record), so the hole holds no record either; the next read skips it."""
    found: list[SegmentFile] = []
    for segment in sorted(segments, key=lambda s: (s.partition, s.min_offset)):
        last = found[-1] if found and found[-1].partition == segment.partition else None
        if last is not None and last.by_content and segment.by_content and last.path == segment.path:
            groups = {*(last.row_groups or ()), *(segment.row_groups or ())}
            found[-1] = replace(last.joined(segment), row_groups=tuple(sorted(groups)))
            continue
        if last is not None and last.max_offset + 1 < segment.min_offset:
            if segment.by_content:
                segment = replace(segment, min_offset=last.max_offset + 1)
            elif last.by_content:
                found[-1] = replace(last, max_offset=segment.min_offset - 1)
        found.append(segment)
    return found


SLICE_FIELDS = ("path", "partition", "size_bytes", "num_records", "min_offset", "max_offset", "min_timestamp_ms",
                "max_timestamp_ms", "min_producer_id", "max_producer_id", "modification_time_ms", "row_groups",
                "by_content")
SLICES_SCHEMA = pa.schema([("path", pa.string()), *((name, pa.int64()) for name in SLICE_FIELDS[1:-2]),
                           ("row_groups", pa.list_(pa.int64())), ("by_content", pa.bool_())])


def slices_table(slices: Iterable[SegmentFile]) -> pa.Table:
    """Slices of shared files as a table, to cache beside the log (`SlicesCache` below)."""
    rows = list(slices)
    return pa.table({name: [getattr(s, name) for s in rows] for name in SLICE_FIELDS}, schema=SLICES_SCHEMA)


class SlicesCache:
    """The rows of the slices cache as last built. The next build keeps the rows of files still shared and
    converts only the slices of files added since: a checkpoint's save costs the commits since the last
    one, not every slice since the last roll (thousands at 64 partitions, all converted in Python)."""

    def __init__(self) -> None:
        self._last: tuple[pa.Table, frozenset[str]] = (slices_table([]), frozenset())  # rows, and their files

    def rows(self, shared: Mapping[str, Sequence[SegmentFile]]) -> pa.Table:
        """The cache's rows for the shared files now known (each file's slices complete: they never change)."""
        last_rows, last_paths = self._last
        added = slices_table(s for path, file_slices in shared.items() if path not in last_paths for s in file_slices)
        still_shared = pc.is_in(last_rows.column("path"), value_set=pa.array(list(shared), pa.string()))
        rows = pa.concat_tables([last_rows.filter(still_shared), added])
        self._last = (rows, frozenset(shared))
        return rows


def slices_from_table(table: pa.Table) -> dict[str, list[SegmentFile]]:
    """The inverse of `slices_table`: slices by path, in row-group order."""
    found: dict[str, list[SegmentFile]] = {}
    for row in table.select(list(SLICE_FIELDS)).to_pylist():
        row["row_groups"] = tuple(row["row_groups"])
        found.setdefault(row["path"], []).append(SegmentFile(**row))
    return found


# A commit's slices, in its commitInfo (`lakelog.slices`): per shared file, one row per slice of these fields.
COMMIT_SLICE_FIELDS = ("partition", "row_groups", "num_records", "size_bytes", "min_offset", "max_offset",
                       "min_timestamp_ms", "max_timestamp_ms", "min_producer_id", "max_producer_id")


def slices_to_commit(slices: Iterable[SegmentFile]) -> dict[str, list[list]]:
    """The slices of the shared files a commit adds, for its commitInfo: a node following the log indexes
    them without reading the files' footers."""
    found: dict[str, list[list]] = {}
    for s in slices:
        found.setdefault(s.path, []).append([getattr(s, name) for name in COMMIT_SLICE_FIELDS])
    return found


def slices_from_commit(path: str, modification_time_ms: int, rows: list[list]) -> list[SegmentFile]:
    """The inverse of `slices_to_commit` for one file."""
    slices = []
    for row in rows:
        fields = dict(zip(COMMIT_SLICE_FIELDS, row, strict=True))
        fields["row_groups"] = tuple(fields["row_groups"])
        slices.append(SegmentFile(path=path, modification_time_ms=modification_time_ms, **fields))
    return slices


def shared_files(actions: pa.Table) -> list[tuple[str, int]]:
    """(path, modification time ms) of the files that hold several partitions (layout 2): their slices
    come from their footers."""
    columns = set(actions.column_names)
    if actions.num_rows == 0 or "min.partition" not in columns or "max.partition" not in columns:
        return []
    col = _column_reader(actions)
    return [(path, to_ms(mtime)) for path, lo, hi, mtime in
            zip(col("path"), col("min.partition"), col("max.partition"), col("modification_time"))
            if lo is not None and hi is not None and lo != hi]


def _column_reader(actions: pa.Table):
    columns = set(actions.column_names)

    def col(name: str) -> list:
        if name not in columns:
            return [None] * actions.num_rows
        column = actions.column(name)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
        return column.to_pylist()

    return col
