"""Producers in the log: the producer ids other writers' commits wrote, so an idempotent producer's batches are
never committed twice across writers. (A producer's history read from the files: `LogReader.producer_history`,
read.py, with the columns named here.)

Threads: `note_versions`, `note_producers` and `check` run with the log lock held (from the snapshot's loads
and the append path); `take_changed` from the topic writer's thread, taking the lock.
"""

from __future__ import annotations

import logging
import threading

from lakelog.platform.delta.delta_log import commit_uri, committed_producers
from lakelog.platform.errors import ProducerStateChanged
from lakelog.platform.log.checkpoints import RETAINED_COMMITS
from lakelog.platform.storage import STORAGE_ERRORS, Storage

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs

# Other writers' commits not yet read for the producer ids they wrote: beyond this many versions the
# writer forgets all producer state instead of reading them (reloading the producers in use is cheaper).
FOREIGN_VERSIONS_MAX = RETAINED_COMMITS // 2
PRODUCER_COLUMNS = ["offset", "timestamp", "producer_id", "producer_epoch", "sequence"]
CONTENT_COLUMNS = ["key", "value", "headers"]


class OtherWriters:
    """Other writers' producers: the versions other writers committed since this node's producer state was last
    checked against them (`_foreign`, inclusive ranges), and the producer ids found in those read so far
    (`_changed_producers`; None: any producer). Both are guarded by the log lock `lock`, handed in by
    `TopicLog` (the snapshot notes versions and producers under it while it loads)."""

    def __init__(self, storage: Storage, uri: str, name: str, lock: threading.RLock) -> None:
        self.storage = storage
        self.uri = uri
        self.name = name
        self._lock = lock
        self._foreign: list[tuple[int, int]] = []
        self._changed_producers: set[int] | None = set()

    def note_versions(self, known: int, latest: int) -> None:
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
                self.note_producers(found)
                self._foreign[0] = (version + 1, end)
            self._foreign.pop(0)

    def note_producers(self, found: set[int] | None) -> None:
        """Producer ids another writer's commit wrote (None: it cannot tell, so any producer)."""
        if found is None or self._changed_producers is None:
            self._changed_producers = None
        else:
            self._changed_producers |= found

    def check(self, producer_ids: frozenset[int]) -> str | None:
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

    def take_changed(self) -> set[int] | None:
        """The producer ids other writers committed batches of since the last call (None: any producer),
        for the producer state to forget. Reads the commit files only when other writers committed."""
        with self._lock:
            try:
                self._read_foreign()
            except STORAGE_ERRORS as exc:  # the versions stay noted; the commit check reads them again
                log.warning("other writers' commits to %s not read: %s", self.name, exc)
            changed, self._changed_producers = self._changed_producers, set()
            return changed
