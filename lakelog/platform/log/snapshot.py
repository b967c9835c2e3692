"""The log as this node knows it: the Delta snapshot (opened, followed commit by commit, refreshed), the segment
index rebuilt from it, and the offsets derived from both and from the commits applied past the snapshot (log
start and end offsets, app versions, the index's files).

Threads: `refresh` and `maybe_refresh` from any thread (fetches, long polls, the writer, the jobs).
`_follow` reads the next commit files outside the log lock and applies them under it; the full load,
`_catch_up`, `_rebuild_index`, `resync` and `refresh_if_stale` run with the log lock held (RLock: a caller
holding it may refresh). `refresh_or_wait`: the appending thread, between attempts, lock not held. The
offsets: any thread (fetches, the writer, the jobs, the console); each takes the log lock (a caller holding it
may ask too); `_transaction_version` runs with it held.
"""

from __future__ import annotations

import logging
import threading
import time

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, Transaction

from lakelog.platform.deadline import Deadline
from lakelog.platform.delta.checkpoint import Append, CheckpointState
from lakelog.platform.delta.delta_log import COMMIT_ID, appended, commit_info, commit_uri, committed_producers
from lakelog.platform.delta.outside_commits import OutsideWatch, beyond_log_end
from lakelog.platform.log.checkpoints import CHECKPOINT_INTERVAL
from lakelog.platform.log.offsets import (
    PARTITION_APP_PREFIX,
    TRANSACTIONAL_APP_ID,
    PartitionState,
    open_app_id,
    partition_app_id,
)
from lakelog.platform.log.producers import OtherWriters
from lakelog.platform.log.tail_cache import TailCache
from lakelog.platform.segments.content_index import DataFile
from lakelog.platform.segments.file_slices import FileSlices
from lakelog.platform.segments.file_stats import holds_several_partitions, segment_of
from lakelog.platform.segments.index import SegmentFile, SegmentIndex, slices_from_commit
from lakelog.platform.storage import STORAGE_ERRORS, STORAGE_RETRY_PAUSE_S, Storage

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs

COMMIT_SLICES = "lakelog.slices"  # commitInfo: the slices of the shared files an append adds (index.py)

# The sequencer is put-if-absent on the next version, so a commit file, once cleaned up, must never look
# free to a writer: a writer whose snapshot is older than SNAPSHOT_MAX_AGE_S (since its last refresh or
# commit) refreshes before it commits, and the cleanup deletes only commit files older than
# CLEANUP_DELAY_S (checkpoints.py), far beyond that age. (A stale writer once recreated versions cleaned
# under it, and the records it acknowledged there were invisible to every reader: the rolling-restart test
# found it.)
# 10 s: a topic committed every few seconds (30 busy topics at the journal's commit rate) commits without a
# read of the log first; the cleanup's 30 s stays far beyond it.
SNAPSHOT_MAX_AGE_S = 10.0
# A refused partition's snapshot is at most this old when it is asked for: a repair is seen that soon.
REFUSED_REFRESH_S = 1.0


class LogSnapshot:
    """The snapshot and what this node derives from it: the Delta snapshot `_dt` (loaded through delta-rs,
    behind this node's own commits), the version reached `_version` (the snapshot's, or that of the latest
    commit applied past it: ours, or another writer's append followed), the segment index `_index`, the log end
    offsets and app versions known for the current snapshot (`_leo`, `_apps`: read from its SetTransactions
    once, and set by each commit applied past it), and when it was last known current (`_synced_at`,
    `_last_refresh`).

    The log lock `lock` (an RLock handed in by `TopicLog`; it also guards `OtherWriters` and the entries of
    `FileSlices`) guards all of this state. Each load tells the parts handed in: the outside watch checks it,
    the tail cache drops the partitions it rewrote, the checkpoint state forgets the versions it did not see
    one by one, `OtherWriters` notes the versions other writers committed."""

    def __init__(self, storage: Storage, uri: str, name: str, lock: threading.RLock, file_slices: FileSlices,
                 outside: OutsideWatch, tail: TailCache, checkpoint_state: CheckpointState,
                 other_writers: OtherWriters) -> None:
        self.storage = storage
        self.uri = uri
        self.name = name
        self._lock = lock
        self._dt = DeltaTable(uri, storage_options=storage.delta_options())
        self._file_slices = file_slices
        # Entries of files holding several partitions, and of other tools' files by content, by path.
        self._slices = file_slices.by_path
        self._outside = outside
        self._tail = tail
        self._checkpoint_state = checkpoint_state
        self._other_writers = other_writers
        self._index = SegmentIndex()
        self._leo: dict[int, int] = {}  # log end offsets known for the current snapshot
        self._apps: dict[str, int] = {}  # app SetTransactions of our commits since the snapshot was current
        self._version = -1
        self._last_refresh = 0.0
        self._synced_at = time.monotonic()  # the snapshot's version was the log's latest then (refresh or commit)
        self._rebuild_index()
        self._opened_at = self._version

    @property
    def version(self) -> int:
        """The version this node's view of the log is at: the next commit goes at `version + 1`."""
        return self._version

    @property
    def opened_at(self) -> int:
        """The version the log was opened at."""
        return self._opened_at

    @property
    def delta_table(self) -> DeltaTable:
        """The Delta snapshot as last loaded (behind this node's own commits): read it with the lock held."""
        return self._dt

    def adopt(self, table: DeltaTable, version: int) -> None:
        """A snapshot of `version` loaded elsewhere (delta-rs's, at a checkpoint) replaces ours when every
        version up to it is in our index: ours grows with each commit it advances over."""
        with self._lock:
            if self._dt.version() < version <= self._version:
                self._dt = table

    # ---- loads -----------------------------------------------------------

    def refresh(self, full: bool = False) -> bool:
        """Load other writers' commits; True when the table changed.

        While the snapshot is recent (SNAPSHOT_MAX_AGE_S), the log is followed commit by commit: a GET of
        the next version, whose absence proves nothing is new (it cannot have been cleaned up: see
        SNAPSHOT_MAX_AGE_S), and appends applied to the index from the commit itself. A LIST costs more,
        and loading the snapshot through delta-rs more still. Any other commit (removes, a schema change),
        a stale snapshot, or `full` load the snapshot; `full` also rebuilds the index from it whether or
        not the version moved (callers that commit through delta-rs, or that doubt the index)."""
        if not full:
            followed = self._follow()
            if followed is not None:
                return followed
        with self._lock:
            started = time.monotonic()
            self._catch_up()
            self._last_refresh = self._synced_at = started
            changed = self._dt.version() != self._version
            if changed or full:
                self._rebuild_index()
            return changed

    def _follow(self) -> bool | None:
        """Apply the log's next commits while they only append; None when one needs the full load (the
        commits before it are applied: the index is that of the version reached), or the snapshot is stale.

        The GETs run outside the lock, so that a commit on this node never waits a round trip behind a
        tailing reader's refresh; what was read is applied only if it is still the next version (else a
        commit of this node, or another refresh, took it meanwhile, and the next one is asked for)."""
        changed = False
        while True:
            started = time.monotonic()
            with self._lock:
                if started - self._synced_at > SNAPSHOT_MAX_AGE_S:
                    return None
                version = self._version + 1
            try:
                commit: bytes | None = self.storage.read_bytes(commit_uri(self.uri, version))
            except FileNotFoundError:
                commit = None
            # Other writers' commits are loaded through delta-rs, and checked there (outside_commits.py).
            info = None if commit is None else commit_info(commit)
            append = None if commit is None or info is None or COMMIT_ID not in info else appended(commit)
            segments = None if append is None or info is None else self._segments_of(append[0], info.get(COMMIT_SLICES))
            with self._lock:
                if self._version + 1 != version:
                    continue
                if commit is None:  # nothing new when it was asked
                    self._last_refresh = self._synced_at = max(self._synced_at, started)
                    return changed
                if append is None or segments is None:
                    return None
                self.apply_commit(version, segments, *append)
                self._other_writers.note_producers(committed_producers(commit))
            changed = True

    def _segments_of(self, adds: list[AddAction], slices: dict[str, list[list]] | None) -> list[SegmentFile] | None:
        """The index entries of another writer's files (a file holding several partitions: from the commit's
        slices, else from its footer); None for a file without lakelog's statistics."""
        segments: list[SegmentFile] = []
        for add in adds:
            try:
                segments.append(segment_of(add))
            except (KeyError, TypeError, ValueError):
                if not holds_several_partitions(add):
                    return None
                if slices and add.path in slices:
                    segments += slices_from_commit(add.path, add.modification_time, slices[add.path])
                    continue
                segments += self._file_slices.read(DataFile(add.path, add.modification_time, add.size, None, True))
        return segments

    def _catch_up(self) -> None:
        """The snapshot at the log's latest version. It does not follow this node's own commits (lakelog
        writes them, not delta-rs): far behind, whose commit files may be cleaned, it reloads from the
        latest checkpoint."""
        if self._version - self._dt.version() > CHECKPOINT_INTERVAL:
            self._dt = DeltaTable(self.uri, storage_options=self.storage.delta_options())
        else:
            self._dt.update_incremental()

    def maybe_refresh(self, max_age_s: float) -> bool:
        if time.monotonic() - self._last_refresh >= max_age_s:
            return self.refresh()
        return False

    def _rebuild_index(self) -> None:
        """The index, log end offsets and app versions from the snapshot, which is current."""
        self._checkpoint_state.forget()  # the versions it loaded were not seen one by one
        old = self._index
        self._apps.clear()
        actions = pa.table(self._dt.get_add_actions(flatten=True))
        self._index = SegmentIndex.from_add_actions(actions, self._file_slices.of_snapshot(actions))
        self._outside.after_load(old, self._index, self._slices, self._version, self._dt.version())
        self._other_writers.note_versions(self._version, self._dt.version())
        self._version = self._dt.version()
        self._last_refresh = time.monotonic()
        for partition, index in old.partitions.items():
            new_paths = {f.path for f in self._index.partition(partition).files}
            if any(f.path not in new_paths for f in index.files):
                self._tail.drop_partition(partition)  # retention or compaction rewrote it
                self._leo.pop(partition, None)  # re-read from the snapshot's SetTransaction
        self.app_version(TRANSACTIONAL_APP_ID)  # asked on every fetch: known with the snapshot, not at a fetch
        for partition, index in self._index.partitions.items():
            # Another writer appended here: read the exact log end from its SetTransaction again.
            if partition in self._leo and index.files and index.files[-1].max_offset + 1 > self._leo[partition]:
                del self._leo[partition]

    def refresh_if_stale(self) -> str | None:
        """Before a commit on a snapshot older than SNAPSHOT_MAX_AGE_S: catch up first (None when current)."""
        if time.monotonic() - self._synced_at <= SNAPSHOT_MAX_AGE_S:
            return None  # steady state: the writer's own commits keep it current
        try:
            self.refresh()
            return None
        except STORAGE_ERRORS as exc:
            return f"its snapshot was stale and the log could not be read: {exc}"

    def resync(self) -> None:
        """Forget what this node derived and take the log end offsets from the log's SetTransactions."""
        self._leo.clear()
        self._apps.clear()
        try:
            self._catch_up()
        except STORAGE_ERRORS:  # a stale snapshot is safe: our next commit conflicts, and refreshes
            log.warning("snapshot of %s not refreshed", self.name)
        self._other_writers.note_versions(self._version, self._dt.version())
        self._version = self._dt.version()  # the offsets now come from the snapshot: commit after it
        try:
            self._rebuild_index()
        except Exception:  # the offsets come from the snapshot without the index; the next append rebuilds it
            log.exception("segment index of %s not rebuilt", self.name)

    def refresh_or_wait(self, deadline: Deadline, cause: str) -> None:
        try:
            self.refresh()
        except STORAGE_ERRORS:
            time.sleep(STORAGE_RETRY_PAUSE_S)
        if deadline.passed():
            raise deadline.timed_out(f"no commit to {self.name!r} ({cause})")

    # ---- commits applied past the snapshot ----------------------------------

    def apply_commit(self, version: int, segments: list[SegmentFile], adds: list[AddAction],
                     txns: list[Transaction], ours: bool = False) -> None:
        """An append at `version` (ours, or another writer's being followed): the snapshot (`_dt`) stays
        behind, so every log end offset and app version it changed is kept here until the next load, and
        the next checkpoint is written from it. `ours`: this node's put proved `version` was free, so it is
        the log's latest."""
        with self._lock:
            self._checkpoint_state.record(Append(version, adds, txns))
            shared: dict[str, list[SegmentFile]] = {}
            for segment in segments:
                self._index.add(segment)
                if segment.shared:
                    shared.setdefault(segment.path, []).append(segment)
            self._slices.update(shared)  # again: a refresh between the write and the commit may have dropped them
            for txn in txns:
                if txn.app_id.startswith(PARTITION_APP_PREFIX):
                    self._leo[int(txn.app_id.removeprefix(PARTITION_APP_PREFIX))] = txn.version
                else:
                    self._apps[txn.app_id] = txn.version
            self._version = version
            if ours:
                self._synced_at = time.monotonic()

    def note_written(self, segments: list[SegmentFile]) -> None:
        """The entries of the shared files this node just wrote, known before their commit."""
        with self._lock:
            for segment in segments:
                if segment.shared:
                    self._slices.setdefault(segment.path, []).append(segment)

    def forget_log_ends(self, partitions: list[int]) -> None:
        """The partitions' log end offsets are read from the snapshot's SetTransactions again."""
        with self._lock:
            for partition in partitions:
                self._leo.pop(partition, None)

    # ---- offsets and files ------------------------------------------------

    def log_end_offset(self, partition: int) -> int:
        """The partition's SetTransaction version in the snapshot (0 when absent), cached per snapshot."""
        with self._lock:
            end = self._leo.get(partition)
            if end is None:
                end = self._leo[partition] = self._transaction_version(partition_app_id(partition)) or 0
            return end

    def app_version(self, app_id: str) -> int:
        """The version of an application's SetTransaction in the snapshot; -1 when absent. Cached per snapshot,
        absence too: it is asked on every fetch (`lakelog.open.<p>`), and delta-rs reads to answer."""
        with self._lock:
            version = self._apps.get(app_id)
            if version is None:
                found = self._transaction_version(app_id)
                version = self._apps[app_id] = -1 if found is None else found
        return version

    def _transaction_version(self, app_id: str) -> int | None:
        """From the snapshot, which reads commit files lazily: if another node's log cleanup removed them
        since it was loaded, it is loaded again from the latest checkpoint (and the index with it)."""
        if self._dt.version() == 0:
            return None  # a new table's creation holds no SetTransaction (delta-rs takes 0.2 ms to say so)
        try:
            return self._dt.transaction_version(app_id)
        except DeltaError as exc:
            if "not found" not in str(exc).lower():
                raise
        log.info("commit files under the snapshot of %s were cleaned up: reloading it", self.name)
        self._dt = DeltaTable(self.uri, storage_options=self.storage.delta_options())
        self._leo.clear()
        self._rebuild_index()
        return self._dt.transaction_version(app_id)

    def log_start_offset(self, partition: int) -> int:
        with self._lock:
            start = self._index.partition(partition).log_start_offset
            open_first = -1  # an open transaction's first record, if any (its records are not in the table yet)
            if self.app_version(TRANSACTIONAL_APP_ID) > 0:
                open_first = self.app_version(open_app_id(partition)) - 1
        start = self.log_end_offset(partition) if start is None else start
        return min(start, open_first) if open_first >= 0 else start

    def partition_state(self, partition: int) -> PartitionState:
        with self._lock:
            index = self._index.partition(partition)
            end = self.log_end_offset(partition)
            start = index.log_start_offset
            return PartitionState(partition, end if start is None else start, end, index.size_bytes, len(index.files))

    def segments(self, partition: int) -> list[SegmentFile]:
        with self._lock:
            return list(self._index.partition(partition).files)

    def all_segments(self) -> dict[int, list[SegmentFile]]:
        """Every partition's files at one moment: planners must not see a flush's shared file in one
        partition and not yet in another (appends add to the index meanwhile)."""
        with self._lock:
            return {p: list(index.files) for p, index in self._index.partitions.items()}

    def files_from(self, partition: int, offset: int) -> list[SegmentFile]:
        """The partition's files from the one holding `offset` (or the first after it) on."""
        with self._lock:
            return list(self._index.partition(partition).files_from(offset))

    def slices_of(self, path: str) -> list[SegmentFile]:
        """The entries of a file holding several partitions (or indexed by content); empty for another file."""
        return list(self._slices.get(path, ()))

    def file_size(self, segment: SegmentFile) -> int:
        """The whole file's size (a shared file's slices each count their own row groups). With the lock held
        (a maintenance commit), or without it (fetches reading files)."""
        if not segment.shared:
            return segment.size_bytes
        return sum(s.size_bytes for s in self._slices.get(segment.path, [segment]))

    def served(self, partition: int) -> None:
        """Raise DataChangedOutside when another writer changed the partition's records outside lakelog: no
        offset it holds beyond the log end, nor any change found at a load (outside_commits.py). A refused
        partition's snapshot is kept current: the load that reads a repair's commit lifts the refusal. From
        reads, and from the append path with the lock held."""
        if self._outside.refusals.refused(partition):
            try:
                self.maybe_refresh(REFUSED_REFRESH_S)
            except STORAGE_ERRORS as exc:  # still refused: checked again at the next call
                log.warning("snapshot of refused %s not refreshed: %s", self.name, exc)
        with self._lock:
            why = beyond_log_end(self._index.partition(partition).files, self.log_end_offset(partition))
            if why is not None:
                self._outside.refusals.refuse(partition, why, repairable=True)
            self._outside.refusals.check(partition)
