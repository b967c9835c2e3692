"""The plan of `lakelog topics repair`: which files another Delta writer appended beyond a partition's log end.

A partition's log end offset moves only by lakelog's SetTransactions, so records another writer appended at
or past it hold offsets lakelog would give out again (outside_commits.beyond_log_end refuses the partition).
When every record of such a file lies past its partition's log end, removing the file whole leaves lakelog's
records exactly as they were: the same files, dense offsets, nothing rewritten. The repair removes them in one
lakelog commit (a DELETE naming the partitions: outside_commits.REPAIRED), which lifts the refusal on every
node that loads it.

Anything else is not an append the repair can undo, and is refused with nothing removed: a file holding
offsets on both sides of the log end, offsets below the log end held twice, a file also holding records of
another partition below that partition's log end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from lakelog.platform.delta.outside_commits import duplicated
from lakelog.platform.segments.index import SegmentFile

REPAIR_JOB = "repair"  # commitInfo lakelog.job of the repair's commit (file_changes.MAINTENANCE_JOB)


@dataclass(frozen=True)
class RepairedPartition:
    """What the repair removes from one partition: the records at offsets from `first_offset` to
    `last_offset` (all at or past `log_end_offset`), in `files`."""

    partition: int
    log_end_offset: int
    records: int
    first_offset: int
    last_offset: int
    files: tuple[str, ...]


@dataclass(frozen=True)
class RepairPlan:
    removes: list[SegmentFile] = field(default_factory=list)  # the index entries of the files removed whole
    partitions: list[RepairedPartition] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)  # partitions the repair cannot fix, with why


def plan_repair(files: Mapping[int, Sequence[SegmentFile]], log_ends: Mapping[int, int]) -> RepairPlan:
    """The plan for a topic: `files` are each partition's index entries in offset order, `log_ends` their log
    end offsets. Nothing to remove and nothing refused: the topic holds no record beyond a log end."""
    refused: dict[int, str] = {}
    past: dict[int, list[SegmentFile]] = {}
    for partition, entries in sorted(files.items()):
        end = log_ends[partition]
        straddling = [e for e in entries if e.min_offset < end <= e.max_offset]
        why = duplicated([e for e in entries if e.max_offset < end])
        if straddling:
            e = straddling[0]
            why = (f"{e.path} holds offsets from {e.min_offset} to {e.max_offset}, on both sides of the log end "
                   f"offset {end}")
        if why is not None:
            refused[partition] = why
        elif any(e.min_offset >= end for e in entries):
            past[partition] = [e for e in entries if e.min_offset >= end]
    removed_paths = {e.path for entries in past.values() for e in entries}
    for partition, entries in sorted(files.items()):  # a file goes whole: all its records must be past the end
        kept = [e for e in entries if e.path in removed_paths and e.min_offset < log_ends[partition]]
        for e in kept:
            for other, others in list(past.items()):
                if any(o.path == e.path for o in others):
                    refused[other] = (f"{e.path} also holds records of partition {partition} below its log end "
                                      f"offset {log_ends[partition]}")
                    del past[other]
    if refused:
        return RepairPlan(refused=refused)
    return RepairPlan([e for p in sorted(past) for e in past[p]],
                      [_repaired(p, log_ends[p], past[p]) for p in sorted(past)])


def _repaired(partition: int, log_end: int, entries: Sequence[SegmentFile]) -> RepairedPartition:
    return RepairedPartition(partition, log_end, sum(e.num_records for e in entries),
                             min(e.min_offset for e in entries), max(e.max_offset for e in entries),
                             tuple(dict.fromkeys(e.path for e in entries)))
