"""The Delta log as the sequencer of a topic's commits: each commit file is put only if its version (the
snapshot's next) is free, whoever makes it (an append, commit.py; a transaction's reservation or fill,
reservations.py; a maintenance job's file changes, maintenance.py; a schema change, table_schema.py). Two
writers of one version conflict at the put; the loser refreshes and commits again.

Threads: the committing threads, one attempt at a time under the log lock (each writing part takes it); the
counters are read from any thread (metrics, tests) without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakelog.platform.delta.delta_log import COMMIT_ID, commit_info, commit_uri
from lakelog.platform.log.checkpoints import CHECKPOINT_INTERVAL, Checkpointer
from lakelog.platform.storage import STORAGE_ERRORS, Storage

if TYPE_CHECKING:
    from lakelog.platform.log.snapshot import LogSnapshot


class Sequencer:
    """The commits of this node and their outcome: `commits` (landed) and `conflicts` (a version lost to another
    writer), incremented by the committing thread with the log lock held; `abandoned`, set by the topic's owner
    when the table is no longer the topic's (deleted, or created again): commit nothing. A commit landing at a
    checkpoint interval's version asks the checkpointer for one."""

    def __init__(self, storage: Storage, uri: str, snapshot: LogSnapshot, checkpointer: Checkpointer) -> None:
        self.storage = storage
        self.uri = uri
        self._snapshot = snapshot
        self._checkpointer = checkpointer
        self.commits = 0
        self.conflicts = 0
        self.abandoned = False  # the table is no longer the topic's (deleted, or created again): commit nothing

    def put(self, version: int, commit: bytes) -> bool:
        """Put the commit file of `version` if it is free; False when another writer's holds it."""
        return self.storage.put_if_absent(commit_uri(self.uri, version), commit)

    def landed(self) -> None:
        self.commits += 1

    def conflicted(self) -> None:
        self.conflicts += 1

    def checkpoint_if_due(self, version: int) -> None:
        """After a commit landed at `version`: the checkpoint interval's versions are checkpointed."""
        if version % CHECKPOINT_INTERVAL == 0:
            self._checkpointer.request(version)

    def committed_version(self, read_version: int, commit_id: str) -> int | None:
        """After an ambiguous failure: the version our commit landed at, if it did (None otherwise)."""
        try:
            self._snapshot.refresh(full=True)  # the log end offsets of a commit found are re-read from the snapshot
            for version in range(read_version + 1, self._snapshot.version + 1):
                info = commit_info(self.storage.read_bytes(commit_uri(self.uri, version)))
                if info.get(COMMIT_ID) == commit_id:
                    return version
        except STORAGE_ERRORS:
            pass
        return None
