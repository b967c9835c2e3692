"""The topic log's snapshot: opening it, following the log's next commits, refreshing it, and the index
rebuilt from it.

Threads: `refresh` and `maybe_refresh` from any thread (fetches, long polls, the writer, the jobs).
`_follow` reads the next commit files outside the log lock `_lock` and applies them under it; the full
load, `_catch_up`, `_rebuild_index`, `_resync` and `_refresh_if_stale` run with `_lock` held (RLock: a
caller holding it may refresh). `_refresh_or_wait`: the appending thread, between attempts, lock not held.
"""

from __future__ import annotations

import logging
import time

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from lakelog.platform.segments.content_index import DataFile
from lakelog.platform.deadline import Deadline
from lakelog.platform.delta.delta_log import COMMIT_ID, appended, commit_info, commit_uri, committed_producers
from lakelog.platform.segments.file_stats import holds_several_partitions, segment_of
from lakelog.platform.segments.index import SegmentFile, SegmentIndex, slices_from_commit
from lakelog.platform.log.checkpoints import CHECKPOINT_INTERVAL
from lakelog.platform.log.commit import COMMIT_SLICES
from lakelog.platform.log.offsets import TRANSACTIONAL_APP_ID
from lakelog.platform.storage import STORAGE_ERRORS, STORAGE_RETRY_PAUSE_S

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs

# The sequencer is put-if-absent on the next version, so a commit file, once cleaned up, must never look
# free to a writer: a writer whose snapshot is older than SNAPSHOT_MAX_AGE_S (since its last refresh or
# commit) refreshes before it commits, and the cleanup deletes only commit files older than
# CLEANUP_DELAY_S (checkpoints.py), far beyond that age. (A stale writer once recreated versions cleaned
# under it, and the records it acknowledged there were invisible to every reader: the rolling-restart test
# found it.)
SNAPSHOT_MAX_AGE_S = 2.0


class Snapshot:
    """The snapshot, followed and refreshed: a part of `TopicLog`, whose `__init__` (topic_log.py) sets up the
    state."""

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
        self.app_version(TRANSACTIONAL_APP_ID)  # asked on every fetch: known with the snapshot, not at a fetch
        for partition, index in self._index.partitions.items():
            # Another writer appended here: read the exact log end from its SetTransaction again.
            if partition in self._leo and index.files and index.files[-1].max_offset + 1 > self._leo[partition]:
                del self._leo[partition]

    def _refresh_if_stale(self) -> str | None:
        """Before a commit on a snapshot older than SNAPSHOT_MAX_AGE_S: catch up first (None when current)."""
        if time.monotonic() - self._synced_at <= SNAPSHOT_MAX_AGE_S:
            return None  # steady state: the writer's own commits keep it current
        try:
            self.refresh()
            return None
        except STORAGE_ERRORS as exc:
            return f"its snapshot was stale and the log could not be read: {exc}"

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
