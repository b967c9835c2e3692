"""One share-partition (KIP-932): which of a partition's records a share group has delivered, to whom, how
often, and what became of them. Pure state, no I/O: the share coordinator (`coordinator.py`) reads the log,
holds the lock and makes the state durable (`state_store.py`).

The records from `start_offset` (Kafka's SPSO) up to `next_offset` (one past SPEO) are in flight; each has a
state. Below `start_offset` every record is done (accepted or archived); from `next_offset` on none was
delivered yet. Acquiring a record locks it to one member until its lock expires; the member then accepts,
releases (it comes back, its delivery count kept) or rejects it (archived). A record released or expired
at the delivery limit is archived too. Archived records are what a dead-letter topic receives.

The window is kept as numpy arrays, one slot per offset (state, delivery count, holder, lock deadline), so a
delivery or an acknowledgement of hundreds of records costs a few array operations, not a Python loop per
record. Offsets without a record (compacted away, transaction markers) are gaps: done from the start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from lakelog.platform.share.errors import InvalidRecordState


class RecordState(IntEnum):
    """Kafka's persisted record states (ShareGroupState; 3 is not used), and lakelog's gap."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4
    GAP = 5  # no record at this offset: done, never delivered


class AckType(IntEnum):
    """ShareFetch/ShareAcknowledge's AcknowledgeTypes."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED, RecordState.GAP)
NOBODY = -1


@dataclass
class InFlight:
    """One in-flight record, as read out (the console, the store)."""

    state: RecordState
    delivery_count: int = 0
    owner: str | None = None  # the member holding it while ACQUIRED
    lock_until_ms: int = 0


@dataclass(frozen=True)
class Acquired:
    """A run of consecutive offsets acquired with one delivery count (ShareFetch's AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True)
class Archived:
    """A record that will not be delivered again, and why (for the dead-letter topic)."""

    offset: int
    delivery_count: int
    reason: str  # "rejected" or "delivery limit"


@dataclass
class SharePartition:
    start_offset: int
    next_offset: int
    archived: list[Archived] = field(default_factory=list)  # archived since the coordinator last took them

    def __post_init__(self) -> None:
        size = self.next_offset - self.start_offset
        self._state = np.full(size, RecordState.GAP, dtype=np.int8)
        self._count = np.zeros(size, dtype=np.int16)
        self._owner = np.full(size, NOBODY, dtype=np.int32)
        self._lock_until = np.zeros(size, dtype=np.int64)
        self._members: dict[str, int] = {}
        self._names: list[str] = []

    @classmethod
    def restored(cls, start: int, end: int, runs: Sequence[tuple[int, int, int, int]]) -> SharePartition:
        """A saved state: runs of (first, last, state, delivery count); offsets of no run are gaps. Acquired
        records come back available (a lock does not outlive its node)."""
        state = cls(start, end)
        for first, last, kept, count in runs:
            lo, hi = first - start, last - start + 1
            restored = RecordState.AVAILABLE if kept == RecordState.ACQUIRED else kept
            state._state[lo:hi], state._count[lo:hi] = restored, count
        return state

    # ---- reads -----------------------------------------------------------------

    def read_from(self) -> int:
        """Where the next delivery reads the log: the first available in-flight record, else new records."""
        available = np.flatnonzero(self._state == RecordState.AVAILABLE)
        return self.start_offset + int(available[0]) if available.size else self.next_offset

    def held(self) -> int:
        """How many records are locked to a member now."""
        return int(np.count_nonzero(self._state == RecordState.ACQUIRED))

    def in_flight(self) -> list[tuple[int, InFlight]]:
        """The records of the window (gaps left out), in offset order."""
        return [(self.start_offset + int(i), InFlight(
            RecordState(int(self._state[i])), int(self._count[i]),
            self._names[self._owner[i]] if self._owner[i] != NOBODY else None, int(self._lock_until[i])))
            for i in np.flatnonzero(self._state != RecordState.GAP)]

    def runs(self) -> list[tuple[int, int, int, int]]:
        """The window as runs of (first, last, state, delivery count), gaps left out (what is saved)."""
        if not self._state.size:
            return []
        change = np.flatnonzero((np.diff(self._state) != 0) | (np.diff(self._count) != 0)) + 1
        starts = np.concatenate(([0], change))
        ends = np.concatenate((change, [self._state.size]))
        return [(self.start_offset + int(lo), self.start_offset + int(hi) - 1, int(self._state[lo]),
                 int(self._count[lo])) for lo, hi in zip(starts, ends) if self._state[lo] != RecordState.GAP]

    # ---- changes ---------------------------------------------------------------

    def acquire(self, member: str, offsets: Sequence[int], read_to: int, now_ms: int, lock_ms: int,
                max_records: int, max_locks: int) -> list[Acquired]:
        """Acquire, for `member`, the available ones among `offsets` (the log's records read from `read_from()`,
        ascending), up to `max_records` and while fewer than `max_locks` are held. `read_to`: one past the
        last offset the read covered; offsets from `next_offset` up to there without a record are gaps."""
        budget = min(max_records, max_locks - self.held())
        if budget <= 0:
            return []
        read = np.asarray(offsets, dtype=np.int64)
        old = read[(read < self.next_offset) & (read >= self.start_offset)]
        old = old[self._state[old - self.start_offset] == RecordState.AVAILABLE]
        new = read[read >= self.next_offset]
        taken = np.concatenate((old, new))[:budget]
        if taken.size < budget:
            self._grow(max(read_to, int(new[-1]) + 1 if new.size else 0))  # the whole read looked at
        elif new.size and taken[-1] >= self.next_offset:
            self._grow(int(taken[-1]) + 1)
        if not taken.size:
            return []
        slots = taken - self.start_offset
        self._state[slots] = RecordState.ACQUIRED
        self._count[slots] += 1
        self._owner[slots] = self._member(member)
        self._lock_until[slots] = now_ms + lock_ms
        return _runs(taken, self._count[slots])

    def acknowledge(self, member: str, first: int, last: int, types: Sequence[int], limit: int) -> None:
        """Apply one acknowledgement batch: one type for the range, or one per offset. Nothing changes if any
        record of the batch is not held by `member` (InvalidRecordState)."""
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            raise InvalidRecordState(f"acknowledgement batch {first}-{last} with {len(types)} types")
        if any(t not in AckType._value2member_map_ for t in set(types)):
            raise InvalidRecordState(f"unknown acknowledge type in {sorted(set(types))}")
        kinds = np.full(last - first + 1, types[0], dtype=np.int8) if len(types) == 1 else np.asarray(types, np.int8)
        offsets = np.arange(first, last + 1, dtype=np.int64)
        inside = (offsets >= self.start_offset) & (offsets < self.next_offset)
        slots = offsets[inside] - self.start_offset
        states = np.full(offsets.size, RecordState.GAP, dtype=np.int8)  # below the window: done
        states[inside] = self._state[slots]
        beyond = offsets >= self.next_offset
        owner = self._members.get(member, -2)
        owned = np.zeros(offsets.size, dtype=bool)
        owned[inside] = (self._state[slots] == RecordState.ACQUIRED) & (self._owner[slots] == owner)
        gap_ok = (kinds == AckType.GAP) & np.isin(states, DONE) & ~beyond
        bad = ~(owned | gap_ok)
        if bad.any():
            raise InvalidRecordState(f"offset {int(offsets[np.argmax(bad)])} is not acquired by member {member!r}")
        mine = offsets[owned] - self.start_offset
        mine_kinds = kinds[owned]
        self._finish(mine[(mine_kinds == AckType.ACCEPT) | (mine_kinds == AckType.GAP)], RecordState.ACKNOWLEDGED)
        self._archive(mine[mine_kinds == AckType.REJECT], "rejected")
        self._release(mine[mine_kinds == AckType.RELEASE], limit)
        self._advance()

    def expire(self, now_ms: int, limit: int) -> int:
        """Release the records whose acquisition lock ran out; answers how many."""
        slots = np.flatnonzero((self._state == RecordState.ACQUIRED) & (self._lock_until <= now_ms))
        self._release(slots, limit)
        self._advance()
        return int(slots.size)

    def release_member(self, member: str, limit: int) -> int:
        """Release every record `member` holds (it left, or its session ended); answers how many."""
        if member not in self._members:
            return 0
        slots = np.flatnonzero((self._state == RecordState.ACQUIRED) & (self._owner == self._members[member]))
        self._release(slots, limit)
        self._advance()
        return int(slots.size)

    def move_start(self, log_start: int) -> None:
        """The log's start moved past records in flight (retention, DeleteRecords): they are gone."""
        if log_start <= self.start_offset:
            return
        self._grow(log_start)
        self._shift(log_start - self.start_offset)

    def reset(self, offset: int) -> None:
        """Start over at `offset` (AlterShareGroupOffsets, on a group without members)."""
        self.start_offset = self.next_offset = offset
        self.__post_init__()

    def take_archived(self) -> list[Archived]:
        taken, self.archived = self.archived, []
        return taken

    # ---- the arrays ------------------------------------------------------------

    def _member(self, member: str) -> int:
        if member not in self._members:
            self._members[member] = len(self._names)
            self._names.append(member)
        return self._members[member]

    def _grow(self, end: int) -> None:
        """Extend the window to `end` (exclusive) with gaps; the records acquired there are marked by the caller."""
        extra = end - self.next_offset
        if extra <= 0:
            return
        self._state = np.concatenate((self._state, np.full(extra, RecordState.GAP, dtype=np.int8)))
        self._count = np.concatenate((self._count, np.zeros(extra, dtype=np.int16)))
        self._owner = np.concatenate((self._owner, np.full(extra, NOBODY, dtype=np.int32)))
        self._lock_until = np.concatenate((self._lock_until, np.zeros(extra, dtype=np.int64)))
        self.next_offset = end

    def _finish(self, slots: np.ndarray, state: RecordState) -> None:
        self._state[slots] = state
        self._owner[slots] = NOBODY
        self._lock_until[slots] = 0

    def _archive(self, slots: np.ndarray, reason: str) -> None:
        self._finish(slots, RecordState.ARCHIVED)
        self.archived.extend(Archived(self.start_offset + int(s), int(self._count[s]), reason) for s in slots)

    def _release(self, slots: np.ndarray, limit: int) -> None:
        spent = self._count[slots] >= limit
        self._archive(slots[spent], "delivery limit")
        self._finish(slots[~spent], RecordState.AVAILABLE)

    def _advance(self) -> None:
        """Move `start_offset` over the done records (and gaps) at the front of the window."""
        pending = np.flatnonzero(~np.isin(self._state, DONE))
        self._shift(int(pending[0]) if pending.size else self._state.size)

    def _shift(self, by: int) -> None:
        if by <= 0:
            return
        self._state, self._count = self._state[by:], self._count[by:]
        self._owner, self._lock_until = self._owner[by:], self._lock_until[by:]
        self.start_offset += by


def _runs(offsets: np.ndarray, counts: np.ndarray) -> list[Acquired]:
    """Consecutive offsets with the same delivery count, as one range each."""
    breaks = np.flatnonzero((np.diff(offsets) != 1) | (np.diff(counts) != 0)) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [offsets.size]))
    return [Acquired(int(offsets[lo]), int(offsets[hi - 1]), int(counts[lo])) for lo, hi in zip(starts, ends)]
