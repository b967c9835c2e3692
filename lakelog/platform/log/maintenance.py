"""The maintenance jobs' file changes (retention, roll, compaction, delete-records) committed to the log as
Delta's own OPTIMIZE and DELETE (file_changes.py), and the checks on the files they remove.

Threads: `commit_file_changes` from the job's thread (a Spark driver, `lakelog jobs`, the scheduler), one
attempt at a time under the log lock `_lock`; `_check_whole_files` with `_lock` held; `_file_size` also
from fetches reading files (read.py), without it.
"""

from __future__ import annotations

import logging
import uuid

from deltalake.transaction import AddAction

from lakelog.platform.clock import now_ms
from lakelog.platform.delta_log import COMMIT_ID, commit_uri
from lakelog.platform.errors import InvalidRequest
from lakelog.platform.file_changes import MAINTENANCE_JOB, encode_file_changes, removed_files
from lakelog.platform.index import SegmentFile
from lakelog.platform.log.checkpoints import CHECKPOINT_INTERVAL
from lakelog.platform.storage import DELTA_COMMIT_RETRIES, STORAGE_ERRORS

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs


class Maintenance:
    """The maintenance jobs' commits: a part of `TopicLog`, whose `__init__` (topic_log.py) sets up the state."""

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
