"""One topic's journal state on its leader: the offsets assigned so far and the acknowledged records not
yet in the table (served to fetches from memory until the table commit).

Threads: the journal's flush thread assigns offsets and adds entries holding `lock` from the assignment
until the journal object is durable (so an exactly-once append, which takes it too, never sees offsets
in flight); the committer takes `lock` only to copy or drop entries, and serialises its commits with
`commit_lock`; fetches read under `lock`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Callable

import pyarrow as pa

from lakelog.platform.errors import LakelogError
from lakelog.platform.journal.objects import Entry
from lakelog.platform.journal.pacing import Due
from lakelog.platform.log.tail_cache import Chunk, contiguous

# The generation of an entry whose journal object is not tracked (committed already): nothing to delete.
NO_OBJECT = ("", 0)
UNREPLICATED_MAX_BYTES = 8 << 20  # per topic: an election needs the last few commits before its copies


@dataclass(frozen=True)
class Acknowledged:
    """An entry of a durable journal object, with its records (TOPIC_SCHEMA, dense offsets)."""

    generation: tuple[str, int]  # (run, slot) of the journal object
    entry: Entry
    records: pa.Table
    known_nbytes: int | None = None  # the records' size, when the writer measured the flush's at once

    @property
    def nbytes(self) -> int:
        """Bytes held in memory (Arrow's `nbytes` of a slice costs tens of microseconds)."""
        return self.records.nbytes if self.known_nbytes is None else self.known_nbytes


class JournalTopic:
    def __init__(self, name: str, table_end: Callable[[int], int]) -> None:
        """`table_end`: the topic table's log end offset of a partition (where its offsets start)."""
        self.name = name
        self._table_end = table_end
        self.lock = threading.RLock()
        self.commit_lock = threading.RLock()  # taken before `lock` by whoever takes both
        self._next: dict[int, int] = {}  # the next offset to assign, per partition used since opened
        self._pending: list[Acknowledged] = []
        self.pending_bytes = 0
        # A replicated topic's entries in its leader's table that the in-sync copies may lack, with the
        # table version that holds them: a replica election carries them to a follower that lacks them,
        # so the entries after them fit there (`NodeJournal.elect`).
        self._unreplicated: list[tuple[int, Acknowledged]] = []  # (table version, entry)
        self.oldest_at: float | None = None  # monotonic time of the oldest pending entry's acknowledgement
        # The writer's generation (run) that claimed the topic's latest epoch, as this writer last knew:
        # another may have taken it since (met at the next put, or checked on the store: JournalWriter.hold).
        self.claimed_by: str | None = None
        # This opening takes no more calls, and why: a replica election moved the topic, or it was deleted.
        self.retired: LakelogError | None = None

    def claimed(self, run: str) -> None:
        """The topic's epoch is the generation's: offsets continue from the table's end, which the claim's
        replay brought past every entry acknowledged before (this writer's own pending ones too), or past
        the pending entries the table lacks yet (carried over by a replica election)."""
        with self.lock:
            self.claimed_by = run
            self._next.clear()
            for item in self._pending:
                partition = item.entry.partition
                self._next[partition] = max(self.next_offset(partition), item.entry.end)

    def next_offset(self, partition: int) -> int:
        with self.lock:
            if partition not in self._next:
                self._next[partition] = self._table_end(partition)
            return self._next[partition]

    def acknowledged(self, items: list[Acknowledged]) -> None:
        """Entries now durable (their offsets from `next_offset`): offsets advance, records served."""
        with self.lock:
            for item in items:
                self._next[item.entry.partition] = max(self.next_offset(item.entry.partition), item.entry.end)
                self._pending.append(item)
                self.pending_bytes += item.nbytes
            if items and self.oldest_at is None:
                self.oldest_at = time.monotonic()

    def reset(self) -> None:
        """Forget assigned offsets (nothing pending): they are read from the table again on next use."""
        with self.lock:
            if not self._pending:
                self._next.clear()

    def pending(self) -> list[Acknowledged]:
        with self.lock:
            return list(self._pending)

    def drop(self, done: list[Acknowledged]) -> None:
        """Entries now in the table (or found there): no longer served from memory."""
        gone = {id(item) for item in done}
        with self.lock:
            self._pending = [item for item in self._pending if id(item) not in gone]
            self.pending_bytes = sum(item.nbytes for item in self._pending)
            self.oldest_at = time.monotonic() if self._pending else None  # what stays waits a new interval

    def committed_unreplicated(self, items: list[Acknowledged], version: int) -> None:
        """Entries now in the leader's table at `version`, not yet copied to the in-sync sites. Kept without
        their journal object (committed, it may go), the latest `UNREPLICATED_MAX_BYTES` of them (acks=1
        traffic is copied by the replication job, unseen here): an election carries only their records."""
        with self.lock:
            self._unreplicated.extend((version, replace(i, generation=NO_OBJECT)) for i in items)
            size = sum(item.nbytes for _, item in self._unreplicated)
            while size > UNREPLICATED_MAX_BYTES and self._unreplicated:
                size -= self._unreplicated.pop(0)[1].nbytes

    def replicated(self, version: int) -> None:
        """The in-sync sites hold the leader's table up to `version`."""
        with self.lock:
            self._unreplicated = [held for held in self._unreplicated if held[0] > version]

    def unreplicated(self) -> list[Acknowledged]:
        with self.lock:
            return [item for _, item in self._unreplicated]

    def due(self, now: float, interval_ms: int, commit_bytes: int) -> Due | None:
        """The topic's table commit is due (its oldest entry waited the interval, or the bytes wait)."""
        with self.lock:
            if not self._pending:
                return None
            waited = now - (self.oldest_at or now)
            by_bytes = self.pending_bytes >= commit_bytes
            return Due(self.name, waited, by_bytes) if by_bytes or waited * 1000 >= interval_ms else None

    # ---- reads ---------------------------------------------------------------

    def waiting_bytes(self, partition: int) -> int:
        """Bytes (in memory) of the partition's acknowledged records not in the table yet."""
        with self.lock:
            return sum(i.nbytes for i in self._pending if i.entry.partition == partition)

    def end(self, partition: int) -> int:
        """The log end offset consumers see: past every acknowledged record (0 if none assigned here)."""
        with self.lock:
            return self._next.get(partition, 0)

    def read(self, partition: int, offset: int, max_records: int) -> pa.Table | None:
        """Acknowledged, uncommitted records of `partition` from `offset` on (TOPIC_SCHEMA); None when
        `offset` is not among them."""
        with self.lock:
            chunks = sorted((Chunk(i.entry.base, i.entry.end, i.records) for i in self._pending
                             if i.entry.partition == partition), key=lambda c: c.start)
        pieces = contiguous(chunks, offset, max_records)
        return pa.concat_tables(pieces) if pieces else None
