"""Checkpoints of the topic table and the cleanup of old commit files, off the produce path. (The rows of a
checkpoint built from the writer's own state: lakelog/platform/delta/checkpoint.py.)

Threads: `request` from a committing thread (the log lock held), taking only the condition `_checkpoints`;
`_run`, `_checkpoint` and what it calls on the maintenance thread (`_MAINTENANCE`, one for all topics of the
process), without the log lock but to install the snapshot delta-rs wrote (`LogSnapshot.adopt`); `wait` and
`close` from the caller's thread (`close` checkpoints on it).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

import pyarrow as pa
from deltalake import DeltaTable

from lakelog.platform.delta.checkpoint import (
    Append,
    CheckpointState,
    checkpoint_rows,
    read_checkpoint,
    write_checkpoint,
)
from lakelog.platform.delta.delta_log import clean_commit_log
from lakelog.platform.delta.table_retention import DEFAULT_FILE_DELETE_DELAY_MS, LOG_KEPT_S, retention_properties
from lakelog.platform.segments.file_slices import FileSlices
from lakelog.platform.storage import STORAGE_ERRORS, Storage

if TYPE_CHECKING:
    from lakelog.platform.log.snapshot import LogSnapshot

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs

# Keep the Delta log small under many small commits: a checkpoint every 25
# commits (opening or refreshing replays at most 24 JSON commits), and only the
# last RETAINED_COMMITS commit files kept (see Checkpointer._clean_log). Set-transaction
# versions never expire: they are the partitions' log end offsets. Retention properties: table_retention.py.
CHECKPOINT_INTERVAL = 25
TOPIC_TABLE_PROPERTIES = {"delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
                          "delta.enableExpiredLogCleanup": "false",
                          **retention_properties(DEFAULT_FILE_DELETE_DELAY_MS)}
RETAINED_COMMITS = 100
# Commit files are deleted only once older than CLEANUP_DELAY_S, far beyond SNAPSHOT_MAX_AGE_S: snapshot.py.
CLEANUP_DELAY_S = LOG_KEPT_S  # advertised as delta.logRetentionDuration
# Checkpoints and log cleanup, off the produce path: one thread for all topics of the process.
_MAINTENANCE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakelog-log-maintenance")


class Checkpointer:
    """Checkpoints and log cleanup. The condition `_checkpoints` guards the scheduling fields (`_due`: the
    latest version due for a checkpoint, `_checkpointed`: the latest checkpointed, or tried, by this node,
    `_checkpointing`: a background run is under way), not the log. The rest is the maintenance thread's (or
    `close`'s, once no run is under way): the times of this node's checkpoints (`_times`), how far the cleanup
    went (`_cleaned_below`), whether the checkpoint of the opened version was tried as a base.

    The checkpoint state (the rows of the last checkpoint and the appends since) is shared with the snapshot,
    which records each commit it applies; it has its own lock."""

    def __init__(self, storage: Storage, uri: str, name: str, snapshot: LogSnapshot,
                 checkpoint_state: CheckpointState, file_slices: FileSlices) -> None:
        self.storage = storage
        self.uri = uri
        self.name = name
        self._snapshot = snapshot
        self._state = checkpoint_state
        self._file_slices = file_slices
        self._checkpoints = threading.Condition()  # guards the three fields below, not the log
        self._due = -1  # the latest version due for a checkpoint
        self._checkpointed = -1  # the latest version checkpointed (or tried) by this node
        self._checkpointing = False  # a background run is under way
        self._times: list[tuple[float, int]] = []  # (when, version) of this node's checkpoints
        self._cleaned_below: int | None = None
        self._opened_checkpoint_tried = False

    def request(self, version: int) -> None:
        """Checkpoints run off the produce path, one at a time per topic; a topic that commits faster
        than it checkpoints skips to its latest due version instead of queueing every one."""
        with self._checkpoints:
            self._due = max(self._due, version)
            if self._checkpointing:
                return
            self._checkpointing = True
        _MAINTENANCE.submit(self._run)

    def _run(self) -> None:
        while True:
            with self._checkpoints:
                version = self._due
                if version <= self._checkpointed:
                    self._checkpointing = False
                    self._checkpoints.notify_all()
                    return
                self._checkpointed = version
            self._checkpoint(version)

    def wait(self, timeout_s: float = 30) -> bool:
        """Wait until no background checkpoint is due or running; False on timeout."""
        with self._checkpoints:
            return self._checkpoints.wait_for(lambda: not self._checkpointing, timeout_s)

    def close(self, timeout_s: float, committed: Callable[[], bool]) -> None:
        """Let the background checkpoint finish and, if this node committed a full interval past its last
        checkpoint, checkpoint the latest version: the next node to open the topic replays few commits.
        `committed()`: whether this node committed to the table and it is still the topic's (an abandoned
        table, its topic deleted, gets none: a new topic of the name may own the folder)."""
        snapshot = self._snapshot
        with self._checkpoints:
            self._checkpoints.wait_for(lambda: not self._checkpointing, timeout_s)
            behind = committed() \
                and snapshot.version - max(self._checkpointed, snapshot.opened_at) >= CHECKPOINT_INTERVAL
            if behind:
                self._checkpointed = snapshot.version
        if behind:
            self._checkpoint(snapshot.version)

    def _checkpoint(self, version: int) -> None:
        """Off the produce path: checkpoint `version` (from this node's state when it saw every version since
        its last checkpoint, else through delta-rs, whose snapshot then replaces ours: it grows with each
        commit it advances over), and delete old commit files."""
        planned = self._state.plan(version) or self._plan_from_opened(version)
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
        self._state.install(version, rows)
        self._clean_log(version)
        self._file_slices.save()
        if snapshot is not None:
            self._snapshot.adopt(snapshot, version)  # every version up to ours is in our index

    def _checkpoint_rows(self, version: int, planned: tuple[pa.Table, list[Append]]) -> pa.Table | None:
        """The rows from this node's state; None (delta-rs writes this one) when they cannot be built, as
        for a checkpoint schema this code does not know."""
        try:
            return checkpoint_rows(*planned)
        except (pa.ArrowException, KeyError, TypeError, ValueError) as exc:
            log.warning("checkpoint of %s at version %d not built from this node's state: %s", self.name, version,
                        exc)
            self._state.forget()
            return None

    def _plan_from_opened(self, version: int) -> tuple[pa.Table, list[Append]] | None:
        """Without a base yet: the checkpoint of the version this node opened the log at, if there is one (a
        new table has version 0's), is the base when every version since was seen one by one."""
        if self._state.has_base or self._opened_checkpoint_tried:
            return None
        self._opened_checkpoint_tried = True
        opened_at = self._snapshot.opened_at
        try:
            self._state.install(opened_at, read_checkpoint(self.storage, self.uri, opened_at))
        except (*STORAGE_ERRORS, pa.ArrowException):
            return None  # none there: delta-rs writes this one
        return self._state.plan(version)

    def _clean_log(self, checkpoint_version: int) -> None:
        """Keep the last RETAINED_COMMITS commit files (and their checkpoints) before the newest checkpoint
        this node made at least CLEANUP_DELAY_S ago, so every file deleted is older than that:
        delta_log.clean_commit_log."""
        now = time.monotonic()
        self._times.append((now, checkpoint_version))
        due = [v for at, v in self._times if now - at >= CLEANUP_DELAY_S]
        self._times = [(at, v) for at, v in self._times if now - at < CLEANUP_DELAY_S]
        if not due:
            return
        try:
            self._cleaned_below = clean_commit_log(self.storage, self.uri, max(due) - RETAINED_COMMITS,
                                                   CHECKPOINT_INTERVAL, self._cleaned_below)
        except OSError as exc:
            log.warning("log cleanup of %s failed: %s", self.name, exc)
