"""Reads of a partition: the tail cache, else the files from the index in waves read at once, stopping at
a hole in the index, cut at the fetch's records and bytes; files' footers cached by path.

Threads: `read` from the caller's thread (fetches, long polls, several at once); the log lock `_lock` is
held only to look at the index and the log's offsets, never over a file read. The first file of a wave is
read on the caller's thread, the others on `_SEGMENT_READS` (shared by all topics); the footer cache has
its own lock, `_metadata_lock`. `_served` is also called from the append path, `_lock` held.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from itertools import groupby

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakelog.platform.errors import OffsetOutOfRange
from lakelog.platform.segments.index import SegmentFile
from lakelog.platform.delta.outside_commits import beyond_log_end
from lakelog.platform.segments.segment import read_file, read_offsets
from lakelog.platform.storage import STORAGE_ERRORS
from lakelog.schemas import TOPIC_FILE_SCHEMA

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs

# The files of one fetch read at once (a consumer catching up reads many; a tailing one, one).
READ_PARALLELISM = 4
_SEGMENT_READS = ThreadPoolExecutor(max_workers=4 * READ_PARALLELISM, thread_name_prefix="lakelog-segment-read")
# On object storage a file up to this size is read whole: one round trip, where a ranged read takes three
# (the size, the footer unless cached, the columns).
WHOLE_READ_BYTES = 1 << 20
# A refused partition's snapshot is at most this old when it is asked for: a repair is seen that soon.
REFUSED_REFRESH_S = 1.0


class Reads:
    """Reads of records: a part of `TopicLog`, whose `__init__` (topic_log.py) sets up the state."""

    def read(self, partition: int, offset: int, max_records: int, max_bytes: int | None = None) -> pa.Table:
        """Records of `partition` from the first offset >= `offset`, in offset order (TOPIC_SCHEMA)."""
        self._served(partition)
        start, end = self.log_start_offset(partition), self.log_end_offset(partition)
        if offset < start or offset > end:
            raise OffsetOutOfRange(
                f"offset {offset} is out of range for {self.name}-{partition}: log start {start}, log end {end}",
                start, end,
            )
        if offset == end or max_records <= 0:
            return _with_partition(TOPIC_FILE_SCHEMA.empty_table(), partition)
        pieces = self.tail.read(partition, offset, max_records)
        if not pieces:
            pieces = in_file_schema(self._read_files(partition, offset, max_records, max_bytes))
        table = pa.concat_tables(pieces) if pieces else TOPIC_FILE_SCHEMA.empty_table()
        table = table.slice(0, max_records)
        if max_bytes is not None:
            table = limit_bytes(table, max_bytes)
        return _with_partition(table, partition)

    def check_served(self, partition: int) -> None:
        """Raise DataChangedOutside when the partition is refused (`_served`): for reads that do not go through
        the table (the node journal's acknowledged records), which a repair lifts all the same."""
        self._served(partition)

    def gap_end(self, partition: int, offset: int, stable: int) -> int:
        """Where the run of offsets from `offset` that hold no record ends, below `stable`: a reader that got
        nothing there continues at it (past a transaction's marker, an aborted range, or what compaction
        left empty at a file's end). `offset` itself when a record, or no indexed file, is there: only files
        the index names, read or known empty, are passed."""
        with self._lock:
            files = list(self._index.partition(partition).files_from(offset))
        at = offset
        for segment in files:
            if segment.min_offset > at or at >= stable:
                break
            if segment.num_records:
                table = self._read_segment(segment, at)
                if table is None or table.num_rows:
                    break
            at = segment.max_offset + 1
        return min(at, stable)

    def _served(self, partition: int) -> None:
        """Raise DataChangedOutside when another writer changed the partition's records outside lakelog: no
        offset it holds beyond the log end, nor any change found at a load (outside_commits.py). A refused
        partition's snapshot is kept current: the load that reads a repair's commit lifts the refusal."""
        if self.outside.refusals.refused(partition):
            try:
                self.maybe_refresh(REFUSED_REFRESH_S)
            except STORAGE_ERRORS as exc:  # still refused: checked again at the next call
                log.warning("snapshot of refused %s not refreshed: %s", self.name, exc)
        with self._lock:
            why = beyond_log_end(self._index.partition(partition).files, self.log_end_offset(partition))
            if why is not None:
                self.outside.refusals.refuse(partition, why, repairable=True)
            self.outside.refusals.check(partition)

    def _read_files(self, partition: int, offset: int, max_records: int, max_bytes: int | None) -> list[pa.Table]:
        """Files from `offset` on, until `max_records` or `max_bytes` (keys and values) are read: a fetch
        with a byte budget reads what it answers, not the rest of the partition."""
        with self._lock:
            files = list(self._index.partition(partition).files_from(offset))
        if files and files[0].min_offset > offset:
            # A hole in the index (files cover a partition's offsets without gaps): answering from the next
            # file would move a reader past records it never saw. Catch up, and answer nothing if it stays.
            log.warning("segment index of %s-%d has no file holding offset %d: rebuilding it", self.name,
                        partition, offset)
            self.refresh(full=True)
            with self._lock:
                files = list(self._index.partition(partition).files_from(offset))
            if files and files[0].min_offset > offset:
                return []
        files = without_holes(files, offset)
        pieces: list[pa.Table] = []
        wanted, budget = max_records, max_bytes
        while files and wanted > 0 and (budget is None or budget > 0):
            wave = read_wave(files, offset, wanted, budget)
            files = files[len(wave):]
            for table in self._read_segments(wave, offset):
                if table is None:  # removed since the index named it: never answer the files after it
                    files = []
                    break
                if table.num_rows:
                    pieces.append(table.slice(0, wanted))
                    wanted -= min(table.num_rows, wanted)
                    if budget is not None:
                        budget -= _payload_bytes(pieces[-1])
                if wanted <= 0 or (budget is not None and budget <= 0):
                    break
        return pieces

    def _read_segments(self, segments: list[SegmentFile], offset: int) -> list[pa.Table | None]:
        """Files read at once: a decode releases the GIL, and on object storage each is a round trip. The
        first is read on the caller's thread, so a fetch goes on however busy the shared pool is."""
        others = [_SEGMENT_READS.submit(self._read_segment, segment, offset) for segment in segments[1:]]
        return [self._read_segment(segments[0], offset), *(other.result() for other in others)]

    def _read_segment(self, segment: SegmentFile, offset: int) -> pa.Table | None:
        uri = f"{self.uri}/{segment.path}"
        try:
            if self.storage.is_local or self._file_size(segment) > WHOLE_READ_BYTES:
                source = self.storage.open_input(uri)
            else:  # one GET: no HEAD for the size, no separate footer and column reads (a tailing reader's case)
                source = pa.BufferReader(self.storage.read_bytes(uri))
            with source:
                table, footer = read_offsets(source, offset, segment.max_offset + 1, partition=segment.partition,
                                             metadata=self._metadata.get(segment.path), row_groups=segment.row_groups)
                self._remember_metadata(segment.path, footer)
        except FileNotFoundError:
            # Removed (by retention, compaction, another tool's OPTIMIZE and VACUUM) after we planned: the next
            # fetch sees the new files, which may hold these records.
            self.refresh()
            return None
        return table

    def _remember_metadata(self, path: str, metadata: pq.FileMetaData) -> None:
        with self._metadata_lock:  # fetches read files from several threads
            self._metadata[path] = metadata
            self._metadata.move_to_end(path)
            while len(self._metadata) > 4096:
                self._metadata.popitem(last=False)

    def read_segment_table(self, segment: SegmentFile, columns: list[str] | None = None) -> pa.Table:
        """A segment's records (used by time lookups and producer-state recovery), in TOPIC_FILE_SCHEMA's
        types."""
        with self.storage.open_input(f"{self.uri}/{segment.path}") as source:
            return read_file(source, columns, segment.row_groups, segment.partition,
                             (segment.min_offset, segment.max_offset))


def _with_partition(table: pa.Table, partition: int) -> pa.Table:
    column = pa.array(np.full(table.num_rows, partition, dtype=np.int32))
    return table.add_column(0, pa.field("partition", pa.int32(), nullable=False), column)


def _record_bytes(table: pa.Table) -> pa.Array:
    return pc.add(
        pc.fill_null(pc.binary_length(table.column("key")), 0),
        pc.fill_null(pc.binary_length(table.column("value")), 0),
    )


def in_file_schema(pieces: list[pa.Table]) -> list[pa.Table]:
    """Pieces read from files, in TOPIC_FILE_SCHEMA's types (files store timestamps in microseconds): each
    run of one stored schema concatenated and cast once, not file by file."""
    runs = [pa.concat_tables(list(run)) for _, run in groupby(pieces, key=lambda piece: piece.schema)]
    return [run if run.schema == TOPIC_FILE_SCHEMA else run.cast(TOPIC_FILE_SCHEMA) for run in runs]


def without_holes(files: list[SegmentFile], offset: int) -> list[SegmentFile]:
    """The files up to the first hole in their offsets: a fetch answers what comes before it (the next
    fetch, starting there, refreshes)."""
    covered = offset
    for i, segment in enumerate(files):
        if segment.min_offset > covered:
            return files[:i]
        covered = segment.max_offset + 1
    return files


def read_wave(files: list[SegmentFile], offset: int, wanted: int, budget: int | None) -> list[SegmentFile]:
    """The next files a fetch reads at once: as many as their statistics say it still wants (records by
    offset span, bytes by file size), at most READ_PARALLELISM; so a tailing read reads one file."""
    wave: list[SegmentFile] = []
    records = size = 0
    for segment in files[:READ_PARALLELISM]:
        wave.append(segment)
        records += segment.max_offset + 1 - max(offset, segment.min_offset)
        size += segment.size_bytes
        if records >= wanted or (budget is not None and size >= budget):
            break
    return wave


def _payload_bytes(table: pa.Table) -> int:
    return int(pc.sum(_record_bytes(table)).as_py() or 0)


def limit_bytes(table: pa.Table, max_bytes: int) -> pa.Table:
    """Cut at `max_bytes` of keys and values, but always keep the first record (as Kafka does)."""
    if table.num_rows <= 1:
        return table
    sizes = _record_bytes(table)
    cumulative = np.cumsum(sizes.to_numpy(zero_copy_only=False))
    keep = max(int(np.searchsorted(cumulative, max_bytes, side="right")), 1)
    return table.slice(0, keep)
