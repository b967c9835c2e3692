"""The maintenance jobs' file changes (retention, roll, compaction, delete-records, the repair of records
appended from outside) committed to the log as Delta's own OPTIMIZE and DELETE (file_changes.py), and the
checks on the files they remove.

Threads: `commit_file_changes` from the job's thread (a Spark driver, `lakelog jobs`, the scheduler), one
attempt at a time under the log lock; `_check_whole_files` with the lock held; the files' sizes
(`LogSnapshot.file_size`) also from fetches reading files (read.py), without it.
"""

from __future__ import annotations

import logging
import threading
import uuid

from deltalake.transaction import AddAction

from lakelog.platform.clock import now_ms
from lakelog.platform.delta.delta_log import COMMIT_ID
from lakelog.platform.delta.file_changes import MAINTENANCE_JOB, encode_file_changes, removed_files
from lakelog.platform.delta.outside_commits import REPAIRED
from lakelog.platform.delta.outside_repair import REPAIR_JOB, RepairedPartition, plan_repair
from lakelog.platform.errors import DataChangedOutside, InvalidRequest, StorageUnavailable
from lakelog.platform.log.sequencer import Sequencer
from lakelog.platform.log.snapshot import LogSnapshot
from lakelog.platform.segments.index import SegmentFile
from lakelog.platform.segments.segment import TableLayout
from lakelog.platform.storage import DELTA_COMMIT_RETRIES, STORAGE_ERRORS

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs


class Maintenance:
    """The maintenance jobs' commits. It owns no state: the files it checks are the snapshot's, read under the
    log lock `lock` (handed in by `TopicLog`) with the commit that removes them; the commit goes through the
    sequencer."""

    def __init__(self, name: str, layout: TableLayout, lock: threading.RLock, snapshot: LogSnapshot,
                 sequencer: Sequencer) -> None:
        self.name = name
        self.layout = layout
        self._lock = lock
        self._snapshot = snapshot
        self._sequencer = sequencer

    def commit_file_changes(self, adds: list[AddAction], removes: list[SegmentFile], data_change: bool,
                            job: str = "", info: dict | None = None) -> bool:
        """Commit files added and removed by a maintenance job in one commit of Delta's own kind (an OPTIMIZE
        without `data_change`, else a DELETE: file_changes.py), put only if its version is free. No offset
        moves, so an append taking the version only moves this commit to the next one. False when a
        concurrent commit removed one of `removes` (another job's: the caller re-plans) or appends kept
        taking the version. `info`: more commitInfo fields."""
        metadata = {COMMIT_ID: uuid.uuid4().hex, **({MAINTENANCE_JOB: job} if job else {}), **(info or {})}
        for _ in range(DELTA_COMMIT_RETRIES):
            with self._lock:
                self._snapshot.refresh(full=True)  # the snapshot past our own commits, and the files others removed
                present = {f.path for p in {s.partition for s in removes} for f in self._snapshot.segments(p)}
                if any(s.path not in present for s in removes):
                    log.info("maintenance commit on %s: files to remove are gone (another job)", self.name)
                    return False
                self._check_whole_files(removes)
                version = self._snapshot.version + 1
                removed = removed_files(removes, self._snapshot.file_size, self.layout.partition_values)
                commit = encode_file_changes(adds, removed, data_change, version - 1, now_ms(), metadata)
                try:
                    landed = self._sequencer.put(version, commit)
                except STORAGE_ERRORS:
                    if self._sequencer.committed_version(version - 1, metadata[COMMIT_ID]) is None:
                        raise
                    landed = True
                if landed:
                    self._sequencer.landed()
                    self._snapshot.refresh(full=True)
                    self._sequencer.checkpoint_if_due(version)  # as delta-rs's post-commit hook did for these commits
                    return True
                self._sequencer.conflicted()
        log.info("maintenance commit on %s kept losing its version to other commits", self.name)
        return False

    def repair_outside_appends(self) -> list[RepairedPartition]:
        """Remove, in one commit, the files another writer appended beyond partitions' log ends
        (outside_repair.py); the commit names the partitions, and each node loading it lifts their refusal.
        Empty when there is nothing to repair; DataChangedOutside, nothing removed, for a change the repair
        cannot undo."""
        for _ in range(DELTA_COMMIT_RETRIES):
            with self._lock:
                self._snapshot.refresh(full=True)
                files = self._snapshot.all_segments()
                partitions = sorted(files)
                plan = plan_repair({p: files[p] for p in partitions},
                                   {p: self._snapshot.log_end_offset(p) for p in partitions})
            if plan.refused:
                first = min(plan.refused)
                reasons = "; ".join(f"partition {p}: {why}" for p, why in sorted(plan.refused.items()))
                log.warning("repair of topic %s refused, nothing removed: %s", self.name, reasons)
                raise DataChangedOutside(
                    f"topic {self.name!r} cannot be repaired, nothing was removed: {reasons}. The repair removes only "
                    f"files another writer appended wholly beyond a partition's log end; restore the table to its "
                    f"last version before the change and restart lakelog", self.name, first)
            if not plan.removes:
                return []
            repaired = [r.partition for r in plan.partitions]
            if self.commit_file_changes([], plan.removes, True, REPAIR_JOB, {REPAIRED: repaired}):
                for r in plan.partitions:
                    log.warning("repaired partition %d of topic %s: removed %d records at offsets %d..%d, beyond its "
                                "log end offset %d, appended by another writer in %s", r.partition, self.name,
                                r.records, r.first_offset, r.last_offset, r.log_end_offset, ", ".join(r.files))
                return plan.partitions
        raise StorageUnavailable(f"the repair of topic {self.name!r} kept losing its commit to others: retry")

    def _check_whole_files(self, removes: list[SegmentFile]) -> None:
        """Removing a file holding several partitions drops all of them: every slice must be rewritten."""
        covered = {(s.path, s.partition) for s in removes}
        for path in {s.path for s in removes if s.shared}:
            left = [x.partition for x in self._snapshot.slices_of(path) if (path, x.partition) not in covered]
            if left:
                raise InvalidRequest(f"removing {path} from {self.name!r} would drop the records of partitions "
                                     f"{left}: a file holding several partitions goes only with all its slices")
