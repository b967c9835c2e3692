"""One share-partition (KIP-932): which of a partition's records a share group has delivered, to whom, how
often, and what became of them. Pure state, no I/O: the share coordinator (`coordinator.py`) reads the log,
holds the lock and makes the state durable (`state_store.py`).

The records from `start_offset` (Kafka's SPSO) up to `next_offset` (one past SPEO) are in flight; each has a
state. Below `start_offset` every record is done (accepted or archived); from `next_offset` on none was
delivered yet. Acquiring a record locks it to one member until its lock expires; the member then accepts,
releases (it comes back, its delivery count kept) or rejects it (archived). A record released or expired
at the delivery limit is archived too. Archived records are what a dead-letter topic receives.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from lakelog.platform.share.errors import InvalidRecordState


class RecordState(IntEnum):
    """Kafka's persisted record states (ShareGroupState): 3 is not used."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """ShareFetch/ShareAcknowledge's AcknowledgeTypes."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass
class InFlight:
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
    records: dict[int, InFlight] = field(default_factory=dict)  # in-flight offsets (gaps: no entry)
    archived: list[Archived] = field(default_factory=list)  # archived since the coordinator last took them

    # ---- reads -----------------------------------------------------------------

    def read_from(self) -> int:
        """Where the next delivery reads the log: the first available in-flight record, else new records."""
        available = [o for o, r in self.records.items() if r.state is RecordState.AVAILABLE]
        return min(available) if available else self.next_offset

    def held(self) -> int:
        """How many records are locked to a member now."""
        return sum(1 for r in self.records.values() if r.state is RecordState.ACQUIRED)

    def in_flight(self) -> list[tuple[int, InFlight]]:
        return sorted(self.records.items())

    # ---- changes ---------------------------------------------------------------

    def acquire(self, member: str, offsets: Sequence[int], read_to: int, now_ms: int, lock_ms: int,
                max_records: int, max_locks: int) -> list[Acquired]:
        """Acquire, for `member`, the available ones among `offsets` (the log's records read from `read_from()`,
        ascending), up to `max_records` and while fewer than `max_locks` are held. `read_to`: one past the
        last offset the read covered; offsets from `next_offset` up to there without a record (compacted away,
        transaction markers) are gaps, done at once."""
        taken: list[tuple[int, int]] = []
        budget = min(max_records, max_locks - self.held())
        covered_to = self.next_offset
        for offset in offsets:
            if len(taken) >= budget:
                break
            if offset >= self.next_offset:
                covered_to = offset + 1
                self.records[offset] = InFlight(RecordState.AVAILABLE)
            entry = self.records.get(offset)
            if entry is None or entry.state is not RecordState.AVAILABLE:
                continue
            entry.state, entry.owner, entry.lock_until_ms = RecordState.ACQUIRED, member, now_ms + lock_ms
            entry.delivery_count += 1
            taken.append((offset, entry.delivery_count))
        if len(taken) < budget:
            covered_to = max(covered_to, read_to)  # the whole read was looked at: its gaps are passed
        self.next_offset = max(self.next_offset, covered_to)
        self._advance()
        return _runs(taken)

    def acknowledge(self, member: str, first: int, last: int, types: Sequence[int], limit: int) -> None:
        """Apply one acknowledgement batch: one type for the range, or one per offset. Nothing changes if any
        record of the batch is not held by `member` (InvalidRecordState)."""
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            raise InvalidRecordState(f"acknowledgement batch {first}-{last} with {len(types)} types")
        kinds = [AckType(t) if t in AckType._value2member_map_ else None for t in types]
        if None in kinds:
            raise InvalidRecordState(f"unknown acknowledge type in {list(types)}")
        per_offset = [kinds[0]] * (last - first + 1) if len(kinds) == 1 else kinds
        for offset, kind in zip(range(first, last + 1), per_offset):
            entry = self.records.get(offset)
            if kind is AckType.GAP and (entry is None or entry.state in DONE):
                continue
            if entry is None or entry.state is not RecordState.ACQUIRED or entry.owner != member:
                raise InvalidRecordState(f"offset {offset} is not acquired by member {member!r}")
        for offset, kind in zip(range(first, last + 1), per_offset):
            entry = self.records.get(offset)
            if entry is None or entry.state in DONE:
                continue
            if kind in (AckType.ACCEPT, AckType.GAP):
                _finish(entry, RecordState.ACKNOWLEDGED)
            elif kind is AckType.REJECT:
                _finish(entry, RecordState.ARCHIVED)
                self.archived.append(Archived(offset, entry.delivery_count, "rejected"))
            else:
                self._release(offset, entry, limit)
        self._advance()

    def expire(self, now_ms: int, limit: int) -> int:
        """Release the records whose acquisition lock ran out; answers how many."""
        expired = [(o, r) for o, r in self.records.items()
                   if r.state is RecordState.ACQUIRED and r.lock_until_ms <= now_ms]
        for offset, entry in expired:
            self._release(offset, entry, limit)
        self._advance()
        return len(expired)

    def release_member(self, member: str, limit: int) -> int:
        """Release every record `member` holds (it left, or its session ended); answers how many."""
        held = [(o, r) for o, r in self.records.items() if r.state is RecordState.ACQUIRED and r.owner == member]
        for offset, entry in held:
            self._release(offset, entry, limit)
        self._advance()
        return len(held)

    def move_start(self, log_start: int) -> None:
        """The log's start moved past records in flight (retention, DeleteRecords): they are gone."""
        if log_start <= self.start_offset:
            return
        for offset in [o for o in self.records if o < log_start]:
            del self.records[offset]
        self.start_offset = log_start
        self.next_offset = max(self.next_offset, log_start)

    def reset(self, offset: int) -> None:
        """Start over at `offset` (AlterShareGroupOffsets, on a group without members)."""
        self.records.clear()
        self.start_offset = self.next_offset = offset

    def take_archived(self) -> list[Archived]:
        taken, self.archived = self.archived, []
        return taken

    def _release(self, offset: int, entry: InFlight, limit: int) -> None:
        if entry.delivery_count >= limit:
            _finish(entry, RecordState.ARCHIVED)
            self.archived.append(Archived(offset, entry.delivery_count, "delivery limit"))
        else:
            _finish(entry, RecordState.AVAILABLE)

    def _advance(self) -> None:
        """Move `start_offset` over the done records (and gaps) at the front of the window."""
        while self.start_offset < self.next_offset:
            entry = self.records.get(self.start_offset)
            if entry is not None and entry.state not in DONE:
                return
            self.records.pop(self.start_offset, None)
            self.start_offset += 1


def _finish(entry: InFlight, state: RecordState) -> None:
    entry.state, entry.owner, entry.lock_until_ms = state, None, 0


def _runs(taken: Iterable[tuple[int, int]]) -> list[Acquired]:
    """Consecutive offsets with the same delivery count, as one range each."""
    runs: list[Acquired] = []
    for offset, count in taken:
        last = runs[-1] if runs else None
        if last is not None and last.last_offset + 1 == offset and last.delivery_count == count:
            runs[-1] = Acquired(last.first_offset, offset, count)
        else:
            runs.append(Acquired(offset, offset, count))
    return runs
