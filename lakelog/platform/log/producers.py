"""Producers in the log: the producer ids other writers' commits wrote (so an idempotent producer's
batches are never committed twice across writers), and a producer's history read from the files.

Threads: `_note_foreign`, `_read_foreign`, `_note_producers` and `_check_producers` run with the log lock
`_lock` held (from the snapshot's loads and the append path); `take_changed_producers` from the topic
writer's thread, taking `_lock`; `producer_history` from the caller's thread (the producer state's
recovery), `_lock` held only to list the files, which are read outside it.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakelog.platform.delta.delta_log import commit_uri, committed_producers
from lakelog.platform.errors import ProducerStateChanged
from lakelog.platform.log.checkpoints import RETAINED_COMMITS
from lakelog.platform.storage import STORAGE_ERRORS
from lakelog.schemas import TOPIC_FILE_SCHEMA

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs

# Other writers' commits not yet read for the producer ids they wrote: beyond this many versions the
# writer forgets all producer state instead of reading them (reloading the producers in use is cheaper).
FOREIGN_VERSIONS_MAX = RETAINED_COMMITS // 2
PRODUCER_COLUMNS = ["offset", "timestamp", "producer_id", "producer_epoch", "sequence"]
CONTENT_COLUMNS = ["key", "value", "headers"]


class Producers:
    """Other writers' producers, a producer's history: a part of `TopicLog`, whose `__init__` (topic_log.py) sets up
    the state."""

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
