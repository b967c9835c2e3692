"""A partition's offsets and files as the snapshot and this node's own commits know them: the log end
offset (the partition's SetTransaction version), the log start offset, other applications'
SetTransactions, the files of the segment index.

Threads: any (fetches, the writer, the jobs, the console); each takes the log lock `_lock` (RLock: a
caller holding it may ask too). `_transaction_version` runs with `_lock` held.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from lakelog.platform.segments.index import SegmentFile

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs

PARTITION_APP_PREFIX = "lakelog.partition."


# Set by every transactional reservation (reservations.py): a table without it has no open transaction, and
# its fetches never ask delta-rs for a partition's `lakelog.open.<p>` (each costs reads of the log).
TRANSACTIONAL_APP_ID = "lakelog.transactional"


def partition_app_id(partition: int) -> str:
    return f"{PARTITION_APP_PREFIX}{partition}"


def open_app_id(partition: int) -> str:
    """The partition's first open transactional offset + 1 (0 or absent: none), see reservations.py."""
    return f"lakelog.open.{partition}"


@dataclass(frozen=True)
class PartitionState:
    partition: int
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    files: int


class Offsets:
    """Log start and end offsets, app versions, the index's files: a part of `TopicLog`, whose `__init__`
    (topic_log.py) sets up the state."""

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
