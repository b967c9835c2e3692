"""Which slots of a generation a sweep may delete (pure: no I/O; docs/architecture.md, "The node journal").

A generation left by a node that is gone stays until a node of that `journal_node` starts again. Once it is
fenced it can never put another slot, so its records objects are final; one whose every entry is already in
its topic's table (the entry's end at or below the partition's log end offset, or the topic deleted) holds
nothing a taker or a restart still needs. Fences and tombstones are never deleted, nor the generation's
highest slot, whatever it holds: a deleted key is free again for put-if-absent, and a zombie's put of the
seal's slot must keep failing (protocol.py's `keep_seal`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from lakelog.platform.journal.objects import FENCE, RECORDS, Entry

# topic -> partition -> the table's log end offset, read after the generation's objects; None: the catalog
# says the topic is gone. A topic missing from the mapping (its table could not be read) is not done.
TableEnds = Mapping[str, Mapping[int, int] | None]


@dataclass(frozen=True)
class Slot:
    """One listed slot of a generation, as read: its kind and (records) its entries."""

    slot: int
    kind: str
    entries: tuple[Entry, ...] = ()


def fenced(slots: Sequence[Slot]) -> bool:
    return any(s.kind == FENCE for s in slots)


def entry_done(entry: Entry, ends: TableEnds) -> bool:
    """The entry's records are in its table (or its topic is gone); unknown counts as not done."""
    if entry.topic not in ends:
        return False
    partitions = ends[entry.topic]
    if partitions is None:
        return True
    end = partitions.get(entry.partition)
    return end is not None and entry.end <= end


def sweepable(slots: Sequence[Slot], ends: TableEnds) -> list[int]:
    """The slots to delete, ascending: records objects of a fenced generation, all of whose entries are
    done, below its highest slot. Nothing of a generation without a fence."""
    if not slots or not fenced(slots):
        return []
    highest = max(s.slot for s in slots)
    return sorted(s.slot for s in slots
                  if s.kind == RECORDS and s.slot != highest and all(entry_done(e, ends) for e in s.entries))


def waiting_topics(slots: Sequence[Slot], ends: TableEnds) -> set[str]:
    """Topics with entries of this generation not yet in their tables (nobody replayed them yet)."""
    return {e.topic for s in slots if s.kind == RECORDS for e in s.entries if not entry_done(e, ends)}
