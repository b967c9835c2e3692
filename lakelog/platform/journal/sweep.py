"""Sweeping generations left behind: records objects of fenced generations whose entries are all in their
tables are deleted; fences, tombstones and each generation's highest slot stay (sweep_plan.py says which).

A writer deletes its own objects once committed, and a node's start replays and seals its own generations;
a generation of a node that never starts again (killed, or moved address so its `journal_node` changed)
stays. Once a taker has fenced it and replayed the topic it took, the objects are dead weight; those still
holding entries of a topic nobody took yet are kept until a taker has replayed them into the table.

Per generation: one LIST, and when it holds more than one slot a GET of its highest (a live generation's
is a records object, a fenced one's a fence: fences go above every slot that landed); a fenced generation's
other slots are read too, then the tables' log end offsets (after the reads: a table's end only grows),
then the deletes. Run by the `journal-sweep` maintenance job (lakelog/spark_jobs/journal_sweep.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Collection, Mapping

from lakelog.platform.errors import LakelogError, UnknownTopicOrPartition
from lakelog.platform.journal.errors import JournalCorrupt
from lakelog.platform.journal.objects import FENCE, JOURNAL, decode, generation_path, slot_name, slot_of
from lakelog.platform.journal.sweep_plan import Slot, TableEnds, sweepable, waiting_topics
from lakelog.platform.storage import STORAGE_ERRORS, Storage

if TYPE_CHECKING:
    from lakelog.platform.broker.node import Broker

log = logging.getLogger(__name__)

UNREADABLE = "unreadable"  # a slot that does not decode: never deleted by the sweep
TopicEndsReader = Callable[[str], Mapping[int, int] | None]  # a topic's table ends now; None: the topic is gone


@dataclass
class GenerationSwept:
    node: str
    run: str
    deleted: list[int]  # slots deleted (or, dry, to delete)
    kept: int  # slots left
    waiting: list[str]  # topics with entries not yet in their tables


@dataclass
class SweepReport:
    generations: int = 0  # listed
    fenced: int = 0
    deleted: int = 0  # objects deleted (or, dry, to delete)
    swept: list[GenerationSwept] = field(default_factory=list)  # fenced generations with anything to report


def sweep_journal(storage: Storage, table_ends: TopicEndsReader, skip: Collection[tuple[str, str]] = (),
                  dry_run: bool = False) -> SweepReport:
    """Sweep every generation under `_journal/gens/` but those in `skip` ((node, run): this process's own)."""
    report = SweepReport()
    ends = _CachedEnds(table_ends)
    gens = storage.uri(JOURNAL, "gens")
    for node in storage.list_names(gens):
        for run in storage.list_names(f"{gens}/{node}"):
            report.generations += 1
            if (node, run) in skip:
                continue
            swept = _sweep_generation(storage, node, run, ends, dry_run)
            if swept is not None:
                report.fenced += 1
                report.deleted += len(swept.deleted)
                if swept.deleted or swept.waiting:
                    report.swept.append(swept)
    return report


def _sweep_generation(storage: Storage, node: str, run: str, ends: _CachedEnds,
                      dry_run: bool) -> GenerationSwept | None:
    """None unless the generation is fenced."""
    folder = storage.uri(generation_path(node, run))
    listed = sorted(s for s in (slot_of(n) for n in storage.list_names(folder)) if s is not None)
    if len(listed) < 2:  # nothing to delete: the highest slot stays whatever it is
        return None
    top = _read(storage, folder, listed[-1])
    if top is None or top.kind != FENCE:
        return None
    slots = [top] + [s for s in (_read(storage, folder, slot) for slot in listed[:-1]) if s is not None]
    known = ends.of({e.topic for s in slots for e in s.entries})  # read after the objects: fresh
    doomed = sweepable(slots, known)
    if doomed and not dry_run:
        storage.delete_files([f"{folder}/{slot_name(s)}" for s in doomed])
        log.info("journal sweep: %d objects of generation %s/%s deleted", len(doomed), node, run)
    return GenerationSwept(node, run, doomed, len(slots) - len(doomed), sorted(waiting_topics(slots, known)))


def _read(storage: Storage, folder: str, slot: int) -> Slot | None:
    """The slot as read; None when it is gone (deleted meanwhile)."""
    try:
        obj = decode(storage.read_bytes(f"{folder}/{slot_name(slot)}"))
    except FileNotFoundError:
        return None
    except JournalCorrupt as exc:
        log.warning("journal sweep: %s/%s kept, not a journal object: %s", folder, slot_name(slot), exc)
        return Slot(slot, UNREADABLE)
    return Slot(slot, obj.kind, tuple(obj.entries))


class _CachedEnds:
    """Each topic's ends read once per sweep: a table's log end offset only grows, so an end read after one
    generation's objects is still a lower bound after the next's."""

    def __init__(self, read: TopicEndsReader) -> None:
        self._read = read
        self._ends: dict[str, Mapping[int, int] | None] = {}

    def of(self, topics: set[str]) -> TableEnds:
        for topic in topics - self._ends.keys():
            try:
                self._ends[topic] = self._read(topic)
            except (LakelogError, *STORAGE_ERRORS) as exc:  # unknown: its entries count as not done
                log.warning("journal sweep: the table of %s not read (its objects kept): %s", topic, exc)
        return {t: self._ends[t] for t in topics if t in self._ends}


def broker_table_ends(broker: Broker) -> TopicEndsReader:
    """A topic's table ends read fresh through the broker; None only when the catalog says it is gone."""
    broker.catalog.refresh()  # a topic deleted by another process since this broker last looked

    def read(topic: str) -> Mapping[int, int] | None:
        try:
            meta = broker.catalog.get(topic)
        except UnknownTopicOrPartition:
            return None
        topic_log = broker.topic_log(topic)
        topic_log.refresh()
        return {p: topic_log.log_end_offset(p) for p in range(meta.partitions)}

    return read


def sweep_broker(broker: Broker, dry_run: bool = False) -> SweepReport:
    """The sweep on a broker's root, never touching its own live generation."""
    skip = {(broker.journal.node, broker.journal.writer.run)}
    return sweep_journal(broker.storage, broker_table_ends(broker), skip, dry_run)
