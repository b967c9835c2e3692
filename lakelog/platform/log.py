"""The partitioned log of one topic: a Delta table, and the Delta log as the offset sequencer.

An append is one Delta commit: its new data (one file for the whole flush in layout 2, one per
partition in layout 1: see segment.py), and one
`SetTransaction("lakelog.partition.<p>", new log end offset)` per partition.
The log end offset of a partition is that transaction's version, read from
the snapshot in O(1). lakelog writes these commits itself (the data files, then
the commit file put only if its version is free); delta-rs reads the snapshot
and writes checkpoints, off the produce path. Two writers of one version
conflict at the put; the loser refreshes and commits again, rewriting its
records only when its offsets moved.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import groupby

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, Transaction

from lakelog.platform.checkpoint import Append, CheckpointState, checkpoint_rows, read_checkpoint, write_checkpoint
from lakelog.platform.clock import now_ms
from lakelog.platform.deadline import Deadline
from lakelog.platform.delta_log import (
    COMMIT_ID,
    PRODUCER_IDS,
    appended,
    clean_commit_log,
    commit_info,
    commit_uri,
    committed_producers,
    encode_commit,
)
from lakelog.platform.errors import (
    InvalidRequest,
    OffsetOutOfRange,
    ProducerStateChanged,
    StorageWriteFailed,
    TopicAlreadyExists,
)
from lakelog.platform.file_changes import MAINTENANCE_JOB, encode_file_changes, removed_files
from lakelog.platform.content_index import DataFile
from lakelog.platform.file_slices import FileSlices
from lakelog.platform.file_stats import holds_several_partitions, segment_of
from lakelog.platform.index import SegmentFile, SegmentIndex, slices_from_commit, slices_to_commit
from lakelog.platform.layout import topic_path
from lakelog.platform.outside_commits import OutsideWatch, beyond_log_end
from lakelog.platform.segment import TableLayout, Written, read_file, read_offsets, write_segments
from lakelog.platform.storage import (
    DELTA_COMMIT_RETRIES,
    STORAGE_ERRORS,
    STORAGE_RETRY_PAUSE_S,
    Storage,
    is_retriable,
)
from lakelog.platform.table_retention import DEFAULT_FILE_DELETE_DELAY_MS, LOG_KEPT_S, retention_properties
from lakelog.platform.tail_cache import TailCache
from lakelog.schemas import TOPIC_FILE_SCHEMA, TOPIC_SCHEMA

log = logging.getLogger(__name__)

# Keep the Delta log small under many small commits: a checkpoint every 25
# commits (opening or refreshing replays at most 24 JSON commits), and only the
# last RETAINED_COMMITS commit files kept (see TopicLog._clean_log). Set-transaction
# versions never expire: they are the partitions' log end offsets. Retention properties: table_retention.py.
CHECKPOINT_INTERVAL = 25
TOPIC_TABLE_PROPERTIES = {"delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
                          "delta.enableExpiredLogCleanup": "false",
                          **retention_properties(DEFAULT_FILE_DELETE_DELAY_MS)}
RETAINED_COMMITS = 100
# The sequencer is put-if-absent on the next version, so a commit file, once cleaned up, must never look
# free to a writer: a writer whose snapshot is older than SNAPSHOT_MAX_AGE_S (since its last refresh or
# commit) refreshes before it commits, and the cleanup deletes only commit files older than
# CLEANUP_DELAY_S, far beyond that age. (A stale writer once recreated versions cleaned under it, and the
# records it acknowledged there were invisible to every reader: the rolling-restart test found it.)
SNAPSHOT_MAX_AGE_S = 2.0
CLEANUP_DELAY_S = LOG_KEPT_S  # advertised as delta.logRetentionDuration
COMMIT_SLICES = "lakelog.slices"  # commitInfo: the slices of the shared files an append adds (index.py)
# Checkpoints and log cleanup, off the produce path: one thread for all topics of the process.
_MAINTENANCE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakelog-log-maintenance")
# The files of one fetch read at once (a consumer catching up reads many; a tailing one, one).
READ_PARALLELISM = 4
_SEGMENT_READS = ThreadPoolExecutor(max_workers=4 * READ_PARALLELISM, thread_name_prefix="lakelog-segment-read")
PARTITION_APP_PREFIX = "lakelog.partition."
# On object storage a file up to this size is read whole: one round trip, where a ranged read takes three
# (the size, the footer unless cached, the columns).
WHOLE_READ_BYTES = 1 << 20
# Other writers' commits not yet read for the producer ids they wrote: beyond this many versions the
# writer forgets all producer state instead of reading them (reloading the producers in use is cheaper).
FOREIGN_VERSIONS_MAX = RETAINED_COMMITS // 2
PRODUCER_COLUMNS = ["offset", "timestamp", "producer_id", "producer_epoch", "sequence"]
CONTENT_COLUMNS = ["key", "value", "headers"]


def partition_app_id(partition: int) -> str:
    return f"{PARTITION_APP_PREFIX}{partition}"


@dataclass(frozen=True)
class Appended:
    """What one append committed: each record's offset (in the order given) and the version holding them."""

    offsets: np.ndarray
    version: int


@dataclass(frozen=True)
class PartitionState:
    partition: int
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    files: int


class TopicLog:
    def __init__(self, storage: Storage, name: str, tail_cache_bytes: int = 0, leader_epoch: int | None = None) -> None:
        self.storage = storage
        self.leader_epoch = leader_epoch  # recorded with each commit, so replicas can tell stale leaders
        self.name = name
        self.uri = storage.uri(topic_path(name))
        self._lock = threading.RLock()
        self._dt = DeltaTable(self.uri, storage_options=storage.delta_options())
        self.layout = TableLayout.of(self._dt.metadata().partition_columns)
        self._index = SegmentIndex()
        # Entries of files holding several partitions, and of other tools' files by content, by path.
        self._file_slices = FileSlices(storage, self.uri, name, self._lock, self._remember_metadata)
        self._slices = self._file_slices.by_path
        self.outside = OutsideWatch(name, storage, self.uri, self._file_slices.read)  # changes made outside lakelog
        self._checkpoint_state = CheckpointState(keep=4 * CHECKPOINT_INTERVAL)
        self._opened_checkpoint_tried = False
        self._leo: dict[int, int] = {}  # log end offsets known for the current snapshot
        self._apps: dict[str, int] = {}  # app SetTransactions of our commits since the snapshot was current
        self._version = -1
        self._last_refresh = 0.0
        self._synced_at = time.monotonic()  # the snapshot's version was the log's latest then (refresh or commit)
        self._checkpoint_times: list[tuple[float, int]] = []  # (when, version) of this node's checkpoints
        self._metadata: OrderedDict[str, pq.FileMetaData] = OrderedDict()
        self._metadata_lock = threading.Lock()
        self.tail = TailCache(tail_cache_bytes)
        self._cleaned_below: int | None = None
        self._checkpoints = threading.Condition()  # guards the three fields below, not the log
        self._checkpoint_due = -1  # the latest version due for a checkpoint
        self._checkpointed = -1  # the latest version checkpointed (or tried) by this node
        self._checkpointing = False  # a background run is under way
        self.commits = 0
        self.conflicts = 0
        # Versions other writers committed since this node's producer state was last checked against them
        # (inclusive ranges), and the producer ids found in those read so far (None: any producer).
        self._foreign: list[tuple[int, int]] = []
        self._changed_producers: set[int] | None = set()
        self._rebuild_index()
        self._opened_at = self._version

    # ---- table lifecycle -------------------------------------------------

    @staticmethod
    def create_table(storage: Storage, name: str, layout: TableLayout = TableLayout.INTAKE,
                     file_delete_delay_ms: int = DEFAULT_FILE_DELETE_DELAY_MS) -> None:
        """Create the topic's table. Never deletes: an empty table (another node creating the same topic)
        is reused; a table holding commits is the rest of a deleted topic, and creation is refused."""
        uri = storage.uri(topic_path(name))
        properties = {**TOPIC_TABLE_PROPERTIES, **retention_properties(file_delete_delay_ms)}  # vacuum's delay
        try:
            created = DeltaTable.create(uri, schema=TOPIC_SCHEMA, partition_by=layout.partition_by, mode="error",
                                        configuration=properties, storage_options=storage.delta_options(), name=name)
        except CommitFailedError:
            pass  # another creator's version 0 won the put-if-absent (S3)
        except DeltaError as exc:
            # "not found", "no files in log segment": another node's delete is removing the former table's
            # log under us.
            text = str(exc).lower()
            if not any(sign in text for sign in ("already exists", "not found", "no files in log segment")):
                raise
        else:
            try:  # the first base of the checkpoints written from the writer's state (platform/checkpoint.py)
                created.create_checkpoint()
            except STORAGE_ERRORS as exc:
                log.warning("checkpoint of the new table %s not written: %s", name, exc)
            return
        if not TopicLog.table_is_empty(storage, name):
            raise TopicAlreadyExists(
                f"topic {name!r} is marked for deletion: its former table at {uri} is still being deleted; "
                f"retry, or run `lakelog topics delete {name}` to finish an interrupted delete")

    @staticmethod
    def table_is_empty(storage: Storage, name: str) -> bool:
        """Whether the topic's table is a bare version 0 (a create's, reused by the next create); False for
        a table holding commits or a log cut short by a delete in progress."""
        try:
            existing = DeltaTable(storage.uri(topic_path(name)), storage_options=storage.delta_options())
            return existing.version() == 0 and not existing.file_uris()
        except STORAGE_ERRORS:
            return False

    @property
    def version(self) -> int:
        return self._version

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
            append = None if commit is None or COMMIT_ID not in commit_info(commit) else appended(commit)
            segments = None if append is None else self._segments_of(append[0], commit_info(commit).get(COMMIT_SLICES))
            with self._lock:
                if self._version + 1 != version:
                    continue
                if commit is None:  # nothing new when it was asked
                    self._last_refresh = self._synced_at = max(self._synced_at, started)
                    return changed
                if append is None or segments is None:
                    return None
                self._apply_commit(version, segments, *append)
                self._note_producers(committed_producers(commit))
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
        self.outside.after_load(old, self._index, self._slices, self._version, self._dt.version())
        self._note_foreign(self._version, self._dt.version())
        self._version = self._dt.version()
        self._last_refresh = time.monotonic()
        for partition, index in old.partitions.items():
            new_paths = {f.path for f in self._index.partition(partition).files}
            if any(f.path not in new_paths for f in index.files):
                self.tail.drop_partition(partition)  # retention or compaction rewrote it
                self._leo.pop(partition, None)  # re-read from the snapshot's SetTransaction
        for partition, index in self._index.partitions.items():
            # Another writer appended here: read the exact log end from its SetTransaction again.
            if partition in self._leo and index.files and index.files[-1].max_offset + 1 > self._leo[partition]:
                del self._leo[partition]

    # ---- offsets ----------------------------------------------------------

    def log_end_offset(self, partition: int) -> int:
        """The partition's SetTransaction version in the snapshot (0 when absent), cached per snapshot."""
        with self._lock:
            end = self._leo.get(partition)
            if end is None:
                end = self._leo[partition] = self._transaction_version(partition_app_id(partition)) or 0
            return end

    def app_version(self, app_id: str) -> int:
        """The version of an application's SetTransaction in the snapshot; -1 when absent."""
        with self._lock:
            version = self._apps.get(app_id)
            if version is None:
                version = self._transaction_version(app_id)
        return -1 if version is None else version

    def _transaction_version(self, app_id: str) -> int | None:
        """From the snapshot, which reads commit files lazily: if another node's log cleanup removed them
        since it was loaded, it is loaded again from the latest checkpoint (and the index with it)."""
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
        return self.log_end_offset(partition) if start is None else start

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

    # ---- append -----------------------------------------------------------

    def append(self, records: pa.Table, partitions: np.ndarray, deadline: Deadline,
               app_transaction: tuple[str, int] | None = None,
               producer_ids: frozenset[int] = frozenset()) -> Appended | None:
        """Commit records (TOPIC_FILE_SCHEMA; offsets not yet assigned) to their partitions.

        Offsets are assigned from this node's snapshot; the data files (one per partition, written in
        parallel on object storage) and then the commit file, put only if its version is still free:
        two round trips, and no read of the log in steady state. On a conflict with another writer the
        snapshot is refreshed; if the offsets still hold the same files are committed at the next
        version, else the records are written again with new offsets. With `app_transaction=(app_id,
        version)` the commit also records that SetTransaction, and nothing is written (None is
        returned) when the table already holds that app id at `version` or later: exactly once.

        `producer_ids`: the idempotent producers whose batches the records are, checked by the caller
        against its producer state; recorded in the commit. Before each attempt, commits of other writers
        that this node has not yet checked are read (none in steady state: no extra request), and if one
        wrote any of these producers `ProducerStateChanged` is raised: the caller reloads their state and
        checks its batches again, so a retry committed by another writer is never committed twice.
        """
        order = np.argsort(partitions, kind="stable")  # by partition, arrival order within each
        ordered = records.take(order)
        runs = _partition_runs(partitions[order])
        written: tuple[dict[int, int], Written] | None = None  # files already written, for these bases
        while True:
            with self._lock:  # one append at a time: the bookkeeping after a commit sees no other in between
                if app_transaction is not None and self.app_version(app_transaction[0]) >= app_transaction[1]:
                    return None
                failure = self._refresh_if_stale() or self._check_producers(producer_ids)
                if failure is None:  # else the log or other writers' commits could not be read: try again
                    for p, _, _ in runs:
                        self._served(p)  # never offsets another writer's records already hold
                    bases = {p: self.log_end_offset(p) for p, _, _ in runs}
                    version = self._version + 1
                    table, offsets = _assign_offsets(ordered, runs, bases)
                    txns = [Transaction(partition_app_id(p), bases[p] + (end - start)) for p, start, end in runs]
                    if app_transaction is not None:
                        txns.append(Transaction(*app_transaction))
                    commit_id = uuid.uuid4().hex
                    try:
                        if written is None or written[0] != bases:
                            written = (bases, self._write_segments(table, runs))
                        landed = self.storage.put_if_absent(
                            commit_uri(self.uri, version),
                            encode_commit(written[1].adds, txns,
                                          self._commit_metadata(commit_id, producer_ids, written[1].segments),
                                          self.layout.partition_by))
                    except STORAGE_ERRORS as exc:
                        committed = self._committed_version(version - 1, commit_id)
                        if committed is not None:
                            return self._landed(table, runs, bases, offsets, order, txns, committed, None)
                        if not is_retriable(exc):
                            raise StorageWriteFailed(
                                f"storage refused the commit to {self.name!r}: {exc}") from None
                        log.warning("storage error committing to %s: %s", self.name, exc)
                        failure = f"storage unavailable: {exc}"
                    else:
                        if landed:
                            return self._landed(table, runs, bases, offsets, order, txns, version, written[1])
                        # Files written for offsets that lose are left unreferenced: the vacuum job deletes
                        # unreferenced files once they are older than any write in flight.
                        self.conflicts += 1
                        log.debug("commit conflict on %s at version %d", self.name, version)
                        failure = "its commits kept conflicting with other writers'"
            self._refresh_or_wait(deadline, failure)

    def _refresh_if_stale(self) -> str | None:
        """Before a commit on a snapshot older than SNAPSHOT_MAX_AGE_S: catch up first (None when current)."""
        if time.monotonic() - self._synced_at <= SNAPSHOT_MAX_AGE_S:
            return None  # steady state: the writer's own commits keep it current
        try:
            self.refresh()
            return None
        except STORAGE_ERRORS as exc:
            return f"its snapshot was stale and the log could not be read: {exc}"

    # ---- other writers' commits and producer state ----------------------

    def _note_foreign(self, known: int, latest: int) -> None:
        """Versions (known, latest] came from other writers (this node tracks its own commits' versions)."""
        if known < 0 or latest <= known:
            return  # the first snapshot: producer state is loaded from it, not from commits
        if self._foreign and self._foreign[-1][1] + 1 >= known + 1:
            self._foreign[-1] = (self._foreign[-1][0], max(self._foreign[-1][1], latest))
        else:
            self._foreign.append((known + 1, latest))
        if sum(end - start + 1 for start, end in self._foreign) > FOREIGN_VERSIONS_MAX:
            self._foreign.clear()
            self._changed_producers = None  # too many to read: every producer's state is reloaded

    def _read_foreign(self) -> None:
        """Read the producer ids of the other writers' commits noted so far (lock held). Storage errors
        propagate with the versions still noted; a commit file already cleaned up counts as any producer."""
        while self._foreign:
            start, end = self._foreign[0]
            for version in range(start, end + 1):
                if self._changed_producers is None:
                    break
                try:
                    found = committed_producers(self.storage.read_bytes(commit_uri(self.uri, version)))
                except FileNotFoundError:
                    found = None
                self._note_producers(found)
                self._foreign[0] = (version + 1, end)
            self._foreign.pop(0)

    def _note_producers(self, found: set[int] | None) -> None:
        """Producer ids another writer's commit wrote (None: it cannot tell, so any producer)."""
        if found is None or self._changed_producers is None:
            self._changed_producers = None
        else:
            self._changed_producers |= found

    def _check_producers(self, producer_ids: frozenset[int]) -> str | None:
        """Before committing batches of `producer_ids`: raise if another writer's commit since this node
        last looked wrote any of them. None when checked; a failure to retry after a refresh otherwise."""
        if not producer_ids or (not self._foreign and self._changed_producers is not None
                                and producer_ids.isdisjoint(self._changed_producers)):
            return None  # steady state: nothing to read
        try:
            self._read_foreign()
        except STORAGE_ERRORS as exc:
            return f"other writers' commits could not be read: {exc}"
        changed = self._changed_producers
        if changed is None or not producer_ids.isdisjoint(changed):
            raise ProducerStateChanged(f"another writer committed batches of these producers to {self.name!r}",
                                       None if changed is None else changed & producer_ids)
        return None

    def take_changed_producers(self) -> set[int] | None:
        """The producer ids other writers committed batches of since the last call (None: any producer),
        for the producer state to forget. Reads the commit files only when other writers committed."""
        with self._lock:
            try:
                self._read_foreign()
            except STORAGE_ERRORS as exc:  # the versions stay noted; the commit check reads them again
                log.warning("other writers' commits to %s not read: %s", self.name, exc)
            changed, self._changed_producers = self._changed_producers, set()
            return changed

    def _write_segments(self, table: pa.Table, runs: list[tuple[int, int, int]]) -> Written:
        try:
            written = write_segments(self.storage, self.uri, table, runs, self.layout)
        except pa.ArrowException as exc:  # data that cannot be stored never will be: not retried
            raise StorageWriteFailed(f"the records of {self.name!r} could not be written: {exc}") from None
        for segment in written.segments:
            if segment.shared:
                self._slices.setdefault(segment.path, []).append(segment)
        if written.footer is not None:
            self._remember_metadata(written.adds[0].path, written.footer)
        return written

    def _landed(self, table: pa.Table, runs: list[tuple[int, int, int]], bases: dict[int, int],
                offsets: np.ndarray, order: np.ndarray, txns: list[Transaction], version: int,
                written: Written | None) -> Appended:
        """Our commit is in the log at `version`, adding `written`; None when it was found there after an
        ambiguous failure (the refreshed snapshot holds it).

        Nothing from here on may fail the append or leave this node's log end offsets behind the
        log: a failure in the bookkeeping re-derives them from the log. Called with the lock held.
        """
        self.commits += 1
        try:
            if written is None:
                for p, _, _ in runs:
                    self._leo.pop(p, None)
            else:
                self._own_commit(version, written, txns)
        except Exception:
            log.exception("bookkeeping after commit to %s failed; offsets re-read from the log", self.name)
            self._resync()
        try:
            files = table.drop_columns(["partition"])
            per_row = files.nbytes / max(files.num_rows, 1)  # measured once: each small slice costs as much
            for p, start, end in runs:
                self.tail.put(p, files.slice(start, end - start), bases[p], int(per_row * (end - start)))
        except Exception:
            log.exception("tail cache of %s not updated; fetches read the files", self.name)
            for p, _, _ in runs:
                self.tail.drop_partition(p)
        in_given_order = np.empty_like(offsets)
        in_given_order[order] = offsets
        return Appended(in_given_order, version)

    def _own_commit(self, version: int, written: Written, txns: list[Transaction]) -> None:
        """What our commit changed, known without reading it back: files, log end offsets, app versions."""
        self._apply_commit(version, written.segments, written.adds, txns)
        self._synced_at = time.monotonic()  # the put proved `version` was free: the log's latest
        if version % CHECKPOINT_INTERVAL == 0:
            self._request_checkpoint(version)

    def _apply_commit(self, version: int, segments: list[SegmentFile], adds: list[AddAction],
                      txns: list[Transaction]) -> None:
        """An append at `version` (ours, or another writer's being followed): the snapshot (`_dt`) stays
        behind, so every log end offset and app version it changed is kept here until the next load, and
        the next checkpoint is written from it."""
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

    def _request_checkpoint(self, version: int) -> None:
        """Checkpoints run off the produce path, one at a time per topic; a topic that commits faster
        than it checkpoints skips to its latest due version instead of queueing every one."""
        with self._checkpoints:
            self._checkpoint_due = max(self._checkpoint_due, version)
            if self._checkpointing:
                return
            self._checkpointing = True
        _MAINTENANCE.submit(self._run_checkpoints)

    def _run_checkpoints(self) -> None:
        while True:
            with self._checkpoints:
                version = self._checkpoint_due
                if version <= self._checkpointed:
                    self._checkpointing = False
                    self._checkpoints.notify_all()
                    return
                self._checkpointed = version
            self._checkpoint(version)

    def wait_for_checkpoints(self, timeout_s: float = 30) -> bool:
        """Wait until no background checkpoint is due or running; False on timeout."""
        with self._checkpoints:
            return self._checkpoints.wait_for(lambda: not self._checkpointing, timeout_s)

    def close(self, timeout_s: float = 30) -> None:
        """Let the background checkpoint finish and, if this node committed a full interval past its last
        checkpoint, checkpoint the latest version: the next node to open the topic replays few commits."""
        with self._checkpoints:
            self._checkpoints.wait_for(lambda: not self._checkpointing, timeout_s)
            behind = self.commits > 0 and self._version - max(self._checkpointed, self._opened_at) >= CHECKPOINT_INTERVAL
            if behind:
                self._checkpointed = self._version
        if behind:
            self._checkpoint(self._version)

    def _resync(self) -> None:
        """Forget what this node derived and take the log end offsets from the log's SetTransactions."""
        self._leo.clear()
        self._apps.clear()
        try:
            self._catch_up()
        except STORAGE_ERRORS:  # a stale snapshot is safe: our next commit conflicts, and refreshes
            log.warning("snapshot of %s not refreshed", self.name)
        self._note_foreign(self._version, self._dt.version())
        self._version = self._dt.version()  # the offsets now come from the snapshot: commit after it
        try:
            self._rebuild_index()
        except Exception:  # the offsets come from the snapshot without the index; the next append rebuilds it
            log.exception("segment index of %s not rebuilt", self.name)

    def _refresh_or_wait(self, deadline: Deadline, cause: str) -> None:
        try:
            self.refresh()
        except STORAGE_ERRORS:
            time.sleep(STORAGE_RETRY_PAUSE_S)
        if deadline.passed():
            raise deadline.timed_out(f"no commit to {self.name!r} ({cause})")

    def _committed_version(self, read_version: int, commit_id: str) -> int | None:
        """After an ambiguous failure: the version our commit landed at, if it did (None otherwise)."""
        try:
            self.refresh(full=True)  # the log end offsets of a commit found are re-read from the snapshot
            for version in range(read_version + 1, self._version + 1):
                info = commit_info(self.storage.read_bytes(commit_uri(self.uri, version)))
                if info.get(COMMIT_ID) == commit_id:
                    return version
        except STORAGE_ERRORS:
            pass
        return None

    def _commit_metadata(self, commit_id: str, producer_ids: frozenset[int], segments: list[SegmentFile]) -> dict:
        # The producer ids let another writer of the topic tell, from the commit alone, whose state it changed;
        # the slices let a node following the log index a shared file without reading its footer.
        metadata: dict = {COMMIT_ID: commit_id, PRODUCER_IDS: sorted(producer_ids)}
        shared = [s for s in segments if s.shared]
        if shared:
            metadata[COMMIT_SLICES] = slices_to_commit(shared)
        if self.leader_epoch is not None:
            metadata["lakelog.leaderEpoch"] = self.leader_epoch
        return metadata

    def _checkpoint(self, version: int) -> None:
        """Off the produce path: checkpoint `version` (from this node's state when it saw every version since
        its last checkpoint, else through delta-rs, whose snapshot then replaces ours: it grows with each
        commit it advances over), and delete old commit files."""
        planned = self._checkpoint_state.plan(version) or self._plan_from_opened(version)
        snapshot = None
        rows = None
        try:
            if planned is not None:
                rows = self._checkpoint_rows(version, planned)
                if rows is not None:
                    write_checkpoint(self.storage, self.uri, version, rows)
            if rows is None:
                snapshot = DeltaTable(self.uri, version=version, storage_options=self.storage.delta_options())
                snapshot.create_checkpoint()
                rows = read_checkpoint(self.storage, self.uri, version)  # the base of the next ones
        except (*STORAGE_ERRORS, pa.ArrowException) as exc:
            log.warning("checkpoint of %s at version %d failed: %s", self.name, version, exc)
            return
        self._checkpoint_state.install(version, rows)
        self._clean_log(version)
        self._file_slices.save()
        with self._lock:
            if snapshot is not None and self._dt.version() < version <= self._version:
                self._dt = snapshot  # every version up to ours is in our index

    def _checkpoint_rows(self, version: int, planned: tuple[pa.Table, list[Append]]) -> pa.Table | None:
        """The rows from this node's state; None (delta-rs writes this one) when they cannot be built, as
        for a checkpoint schema this code does not know."""
        try:
            return checkpoint_rows(*planned)
        except (pa.ArrowException, KeyError, TypeError, ValueError) as exc:
            log.warning("checkpoint of %s at version %d not built from this node's state: %s", self.name, version,
                        exc)
            self._checkpoint_state.forget()
            return None

    def _plan_from_opened(self, version: int) -> tuple[pa.Table, list[Append]] | None:
        """Without a base yet: the checkpoint of the version this node opened the log at, if there is one (a
        new table has version 0's), is the base when every version since was seen one by one."""
        if self._checkpoint_state.has_base or self._opened_checkpoint_tried:
            return None
        self._opened_checkpoint_tried = True
        try:
            self._checkpoint_state.install(self._opened_at, read_checkpoint(self.storage, self.uri, self._opened_at))
        except (*STORAGE_ERRORS, pa.ArrowException):
            return None  # none there: delta-rs writes this one
        return self._checkpoint_state.plan(version)

    def _clean_log(self, checkpoint_version: int) -> None:
        """Keep the last RETAINED_COMMITS commit files (and their checkpoints) before the newest checkpoint
        this node made at least CLEANUP_DELAY_S ago, so every file deleted is older than that:
        delta_log.clean_commit_log."""
        now = time.monotonic()
        self._checkpoint_times.append((now, checkpoint_version))
        due = [v for at, v in self._checkpoint_times if now - at >= CLEANUP_DELAY_S]
        self._checkpoint_times = [(at, v) for at, v in self._checkpoint_times if now - at < CLEANUP_DELAY_S]
        if not due:
            return
        try:
            self._cleaned_below = clean_commit_log(self.storage, self.uri, max(due) - RETAINED_COMMITS,
                                                   CHECKPOINT_INTERVAL, self._cleaned_below)
        except OSError as exc:
            log.warning("log cleanup of %s failed: %s", self.name, exc)

    def commit_file_changes(self, adds: list[AddAction], removes: list[SegmentFile], data_change: bool,
                            job: str = "") -> bool:
        """Commit files added and removed by a maintenance job in one commit of Delta's own kind (an OPTIMIZE
        without `data_change`, else a DELETE: file_changes.py), put only if its version is free. No offset
        moves, so an append taking the version only moves this commit to the next one. False when a
        concurrent commit removed one of `removes` (another job's: the caller re-plans) or appends kept
        taking the version."""
        metadata = {COMMIT_ID: uuid.uuid4().hex, **({MAINTENANCE_JOB: job} if job else {})}
        for _ in range(DELTA_COMMIT_RETRIES):
            with self._lock:
                self.refresh(full=True)  # the snapshot past our own commits, and the files others removed
                present = {f.path for p in {s.partition for s in removes} for f in self._index.partition(p).files}
                if any(s.path not in present for s in removes):
                    log.info("maintenance commit on %s: files to remove are gone (another job)", self.name)
                    return False
                self._check_whole_files(removes)
                version = self._version + 1
                removed = removed_files(removes, self._file_size, self.layout.partition_values)
                commit = encode_file_changes(adds, removed, data_change, version - 1, now_ms(), metadata)
                try:
                    landed = self.storage.put_if_absent(commit_uri(self.uri, version), commit)
                except STORAGE_ERRORS:
                    if self._committed_version(version - 1, metadata[COMMIT_ID]) is None:
                        raise
                    landed = True
                if landed:
                    self.commits += 1
                    self.refresh(full=True)
                    if version % CHECKPOINT_INTERVAL == 0:  # as delta-rs's post-commit hook did for these commits
                        self._request_checkpoint(version)
                    return True
                self.conflicts += 1
        log.info("maintenance commit on %s kept losing its version to other commits", self.name)
        return False

    def _check_whole_files(self, removes: list[SegmentFile]) -> None:
        """Removing a file holding several partitions drops all of them: every slice must be rewritten."""
        covered = {(s.path, s.partition) for s in removes}
        for path in {s.path for s in removes if s.shared}:
            left = [x.partition for x in self._slices.get(path, ()) if (path, x.partition) not in covered]
            if left:
                raise InvalidRequest(f"removing {path} from {self.name!r} would drop the records of partitions "
                                     f"{left}: a file holding several partitions goes only with all its slices")

    def _file_size(self, segment: SegmentFile) -> int:
        """The whole file's size (a shared file's slices each count their own row groups)."""
        if not segment.shared:
            return segment.size_bytes
        return sum(s.size_bytes for s in self._slices.get(segment.path, [segment]))

    # ---- read -------------------------------------------------------------

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
            pieces = _in_file_schema(self._read_files(partition, offset, max_records, max_bytes))
        table = pa.concat_tables(pieces) if pieces else TOPIC_FILE_SCHEMA.empty_table()
        table = table.slice(0, max_records)
        if max_bytes is not None:
            table = _limit_bytes(table, max_bytes)
        return _with_partition(table, partition)

    def _served(self, partition: int) -> None:
        """Raise DataChangedOutside when another writer changed the partition's records outside lakelog: no
        offset it holds beyond the log end, nor any change found at a load (outside_commits.py)."""
        with self._lock:
            why = beyond_log_end(self._index.partition(partition).files, self.log_end_offset(partition))
            if why is not None:
                self.outside.refusals.refuse(partition, why)
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
        files = _without_holes(files, offset)
        pieces: list[pa.Table] = []
        wanted, budget = max_records, max_bytes
        while files and wanted > 0 and (budget is None or budget > 0):
            wave = _read_wave(files, offset, wanted, budget)
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

    def producer_history(self, producer_id: int, content: bool = False) -> pa.Table:
        """A producer's records in the log (partition, offset, timestamp, producer_id, producer_epoch,
        sequence; with `content` also key, value, headers), from the files whose statistics may hold it."""
        columns = PRODUCER_COLUMNS + CONTENT_COLUMNS if content else PRODUCER_COLUMNS
        with self._lock:
            segments = [s for p in self._index.partitions.values() for s in p.files if s.may_hold_producer(producer_id)]
        pieces = []
        for segment in segments:
            table = self.read_segment_table(segment, columns)
            table = table.filter(pc.equal(table.column("producer_id"), producer_id))
            pieces.append(table.append_column("partition", pa.array(
                np.full(table.num_rows, segment.partition, dtype=np.int32))))
        if not pieces:
            schema = pa.schema([TOPIC_FILE_SCHEMA.field(name) for name in columns] + [("partition", pa.int32())])
            return schema.empty_table()
        return pa.concat_tables(pieces)

    def offset_for(self, partition: int, spec: str | int) -> int:
        """`earliest`, `latest`, or a timestamp in ms: the earliest offset at or after it (latest if none)."""
        if spec == "earliest":
            return self.log_start_offset(partition)
        if spec == "latest":
            return self.log_end_offset(partition)
        try:
            timestamp = int(spec)
        except (TypeError, ValueError):
            raise InvalidRequest(f"offset spec must be earliest, latest or a timestamp in ms, got {spec!r}") from None
        found = self.offset_for_timestamp(partition, timestamp)
        return self.log_end_offset(partition) if found is None else found

    def offset_for_timestamp(self, partition: int, timestamp_ms: int) -> int | None:
        """The earliest offset whose timestamp is >= `timestamp_ms`; None when there is none."""
        for segment in self.segments(partition):
            if segment.max_timestamp_ms < timestamp_ms:
                continue
            table = self.read_segment_table(segment, ["offset", "timestamp"])
            ts = table.column("timestamp").cast(pa.int64())
            hits = pc.filter(table.column("offset"), pc.greater_equal(ts, timestamp_ms))
            if len(hits):
                return int(pc.min(hits).as_py())
        return None


def _partition_runs(sorted_partitions: np.ndarray) -> list[tuple[int, int, int]]:
    """(partition, start, end) of each run of equal partitions in a sorted array."""
    values, starts, counts = np.unique(sorted_partitions, return_index=True, return_counts=True)
    return [(int(p), int(s), int(s + c)) for p, s, c in zip(values, starts, counts)]


def _assign_offsets(ordered: pa.Table, runs: list[tuple[int, int, int]],
                    bases: dict[int, int]) -> tuple[pa.Table, np.ndarray]:
    """The flush as one TOPIC_SCHEMA table (partition by partition, dense offsets from each base)."""
    n = ordered.num_rows
    offsets = np.empty(n, dtype=np.int64)
    partitions = np.empty(n, dtype=np.int32)
    for p, start, end in runs:
        offsets[start:end] = np.arange(bases[p], bases[p] + end - start, dtype=np.int64)
        partitions[start:end] = p
    table = ordered.set_column(ordered.schema.get_field_index("offset"), "offset", pa.array(offsets))
    table = table.add_column(0, pa.field("partition", pa.int32(), nullable=False), pa.array(partitions))
    # One chunk: the delta-rs writer pays per record batch, and a flush of many small calls has many.
    return table.combine_chunks(), offsets


def _with_partition(table: pa.Table, partition: int) -> pa.Table:
    column = pa.array(np.full(table.num_rows, partition, dtype=np.int32))
    return table.add_column(0, pa.field("partition", pa.int32(), nullable=False), column)


def _record_bytes(table: pa.Table) -> pa.Array:
    return pc.add(
        pc.fill_null(pc.binary_length(table.column("key")), 0),
        pc.fill_null(pc.binary_length(table.column("value")), 0),
    )


def _in_file_schema(pieces: list[pa.Table]) -> list[pa.Table]:
    """Pieces read from files, in TOPIC_FILE_SCHEMA's types (files store timestamps in microseconds): each
    run of one stored schema concatenated and cast once, not file by file."""
    runs = [pa.concat_tables(list(run)) for _, run in groupby(pieces, key=lambda piece: piece.schema)]
    return [run if run.schema == TOPIC_FILE_SCHEMA else run.cast(TOPIC_FILE_SCHEMA) for run in runs]


def _without_holes(files: list[SegmentFile], offset: int) -> list[SegmentFile]:
    """The files up to the first hole in their offsets: a fetch answers what comes before it (the next
    fetch, starting there, refreshes)."""
    covered = offset
    for i, segment in enumerate(files):
        if segment.min_offset > covered:
            return files[:i]
        covered = segment.max_offset + 1
    return files


def _read_wave(files: list[SegmentFile], offset: int, wanted: int, budget: int | None) -> list[SegmentFile]:
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


def _limit_bytes(table: pa.Table, max_bytes: int) -> pa.Table:
    """Cut at `max_bytes` of keys and values, but always keep the first record (as Kafka does)."""
    if table.num_rows <= 1:
        return table
    sizes = _record_bytes(table)
    cumulative = np.cumsum(sizes.to_numpy(zero_copy_only=False))
    keep = max(int(np.searchsorted(cumulative, max_bytes, side="right")), 1)
    return table.slice(0, keep)
