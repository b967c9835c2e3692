"""A node's start: its own journal entries that never reached their tables are put there, at their
offsets, before it takes a produce call (docs/architecture.md, "Crash between journal write and table
commit").

Every generation the node left (`_journal/gens/<node>/<run>/`) is read whole; per topic, all their
entries are planned together (planner.py orders them by offset, whichever generation holds them): those
the table holds are skipped, the rest appended at their offsets. An entry above a gap, or one that
overlaps records of another writer, stops the start (`JournalReplayFailed`): acknowledged records are
never moved or dropped by guess. Replaying twice changes nothing. Afterwards each generation's objects are
deleted but the fence this start put in it (the slot stays taken), except a generation holding entries of
a partition another Delta writer changed (DATA_CHANGED_OUTSIDE_LAKELOG): those wait in it for `lakelog
topics repair` and the next start, the topic's other partitions committed now. A topic deleted since is
skipped (topic ids are not built: a topic deleted and created again under the same name meanwhile would
get the old entries, or refuse the start).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from lakelog.platform.errors import DataChangedOutside, OffsetsMoved
from lakelog.platform.journal.claims import fence_generation, objects_below
from lakelog.platform.journal.errors import JournalReplayFailed
from lakelog.platform.journal.objects import (
    FENCE,
    RECORDS,
    JournalObject,
    decode,
    generation_path,
    generations_path,
    slot_name,
    slot_of,
)
from lakelog.platform.journal.planner import plan_commit
from lakelog.platform.journal.topic_state import Acknowledged
from lakelog.platform.storage import Storage

if TYPE_CHECKING:
    from lakelog.platform.broker.open_topic import OpenTopic

log = logging.getLogger(__name__)


@dataclass
class Replayed:
    generations: int = 0
    objects: int = 0
    records: int = 0  # records appended to tables by this replay
    skipped_topics: list[str] = field(default_factory=list)
    # Every generation of the node the start found: each sealed, or fenced and replayed now. A topic whose
    # latest epoch names one is claimed without fencing or reading it again (claims.py, `take_over`).
    settled: frozenset[str] = frozenset()


def read_generations(storage: Storage, node: str) -> tuple[list[str], dict[str, list[tuple[int, JournalObject]]]]:
    """Every generation the node left (the runs listed), and those not sealed, fenced first (a process of
    this node that is still running, paused, acknowledges nothing more): run -> its objects below the fence
    (slot order). A sealed generation (one fence or tombstone left) is not fenced again and holds nothing."""
    out: dict[str, list[tuple[int, JournalObject]]] = {}
    runs = storage.list_names(storage.uri(generations_path(node)))
    for run in runs:
        folder = storage.uri(generation_path(node, run))
        slots = sorted(s for s in (slot_of(n) for n in storage.list_names(folder)) if s is not None)
        if len(slots) == 1 and decode(storage.read_bytes(f"{folder}/{slot_name(slots[0])}")).kind != RECORDS:
            continue
        fence, listed = fence_generation(storage, node, run, node)
        out[run] = objects_below(storage, node, run, fence, listed) + [(fence, JournalObject(FENCE, node, run, fence))]
    return runs, out


def replay(storage: Storage, node: str, open_topic: Callable[[str], OpenTopic | None],
           commit: Callable[[OpenTopic, list[Acknowledged]], list[Acknowledged]]) -> Replayed:
    """`open_topic`: the topic's machinery, None when the topic no longer exists (the caller closes what it
    opened); `commit`: committer.py's `commit_entries`."""
    runs, generations = read_generations(storage, node)
    report = Replayed(generations=len(generations), settled=frozenset(runs))
    by_topic: dict[str, list[Acknowledged]] = {}
    waiting: set[str] = set()  # generations holding entries a refused partition keeps out: not sealed
    for run, objects in generations.items():
        for slot, obj in objects:
            if obj.kind != RECORDS:
                continue
            report.objects += 1
            for topic in obj.topics():
                records = obj.topic_records(topic)
                start = 0
                for entry in (e for e in obj.entries if e.topic == topic):
                    by_topic.setdefault(topic, []).append(
                        Acknowledged((run, slot), entry, records.slice(start, entry.count)))
                    start += entry.count
    for topic, items in by_topic.items():
        opened = open_topic(topic)
        if opened is None:
            report.skipped_topics.append(topic)
            continue
        ends = {i.entry.partition: opened.log.log_end_offset(i.entry.partition) for i in items}
        plan = plan_commit(ends, [i.entry for i in items])
        bad = plan.misfit
        if bad is not None:
            log.error("journal replay of node %s refused: %s", node, bad)
            raise JournalReplayFailed(
                f"journal entry {bad} cannot be placed: the table of {topic!r} ends at "
                f"{ends.get(bad.partition)} (a gap before it or other records at its offsets); not started")
        try:
            commit(opened, items)
        except OffsetsMoved:  # another process of this node replayed them meanwhile: plan again on the log now
            opened.log.refresh()
            commit(opened, items)
        except DataChangedOutside as exc:  # the refused partition's entries wait; the other partitions' go in
            log.error("journal replay of node %s: %s; its acknowledged entries there stay in the journal until "
                      "`lakelog topics repair %s` and the next start", node, exc.message, topic)
            waiting.update(item.generation[0] for item in items)
            commit(opened, items)
        report.records += sum(e.count for e in plan.commit)
    for run, objects in generations.items():
        if run not in waiting:
            _seal(storage, node, run, [slot for slot, _ in objects])
    if report.objects:
        log.warning("journal of node %s: %d records of %d objects in %d generations replayed into their tables",
                    node, report.records, report.objects, report.generations)
    return report


def _seal(storage: Storage, node: str, run: str, slots: list[int]) -> None:
    """A replayed generation keeps only its fence, its highest slot (the slots stay taken)."""
    folder = storage.uri(generation_path(node, run))
    highest = max(slots)
    storage.delete_files([f"{folder}/{slot_name(s)}" for s in slots if s != highest])
