"""Kafka's DeleteRecords: a partition's log start moved up to an offset, as retention moves it.

lakelog's log start offset is the first offset of a partition's first file (`platform/segments/index.py`), and
retention moves it by removing the oldest files in a metadata commit. DeleteRecords does the same, to an
exact offset: the files wholly below it leave the table, and the one file it falls inside is rewritten
from it on, with offset statistics starting at it (as compaction's outputs state their bounds), so the
new log start is exactly the offset asked even where compaction left no record at it. A Delta reader then
sees what a Kafka consumer sees: nothing below the new log start.

A file holding several partitions (layout 2's flushes) leaves the table only with all its slices, so the
slices of the other partitions are rewritten unchanged in the same commit, as the roll does. Planning is
pure (`plan_delete_records`); `delete_records` writes the new files and commits through
`TopicLog.commit_file_changes`, re-planning when a maintenance job removed a file first.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from deltalake.transaction import AddAction

from lakelog.compaction.plan import is_segment
from lakelog.compaction.rewrite import RewriteResult, merge_segments
from lakelog.platform.broker.node import Broker
from lakelog.platform.errors import LakelogError, OffsetOutOfRange, StorageWriteFailed
from lakelog.platform.log import TopicLog
from lakelog.platform.segments.index import SegmentFile

log = logging.getLogger(__name__)

JOB = "delete-records"  # the commit's `lakelog.job`
MAX_ROUNDS = 3
HIGH_WATERMARK = -1  # Kafka's "delete everything": up to the high watermark


def resolve_target(offset: int, log_start: int, high_watermark: int) -> int:
    """Kafka's rules for a DeleteRecords offset: -1 means the high watermark; another offset below 0 or
    past the high watermark is OFFSET_OUT_OF_RANGE; one at or below the log start changes nothing."""
    target = high_watermark if offset == HIGH_WATERMARK else offset
    if not 0 <= target <= high_watermark:
        raise OffsetOutOfRange(f"cannot delete records up to offset {offset}: the high watermark is "
                               f"{high_watermark} (-1 deletes up to it)", log_start, high_watermark)
    return max(target, log_start)


@dataclass(frozen=True)
class Rewrite:
    """A file's entry (one partition's slice) rewritten from `start` on (its own first offset: unchanged)."""

    segment: SegmentFile
    start: int

    @property
    def bounded(self) -> SegmentFile:
        """The entry as read and written: its offsets from `start` (read_file keeps only those)."""
        return replace(self.segment, min_offset=self.start)


@dataclass(frozen=True)
class DeletePlan:
    removed: tuple[SegmentFile, ...]  # every entry leaving the table (rewritten ones included)
    rewrites: tuple[Rewrite, ...]

    @property
    def changes(self) -> bool:
        return bool(self.removed)


def plan_delete_records(targets: Mapping[int, int], files: Mapping[int, Sequence[SegmentFile]]) -> DeletePlan:
    """What moves each partition's log start to its target offset: `files` are every partition's entries at
    one moment (`TopicLog.all_segments`), so that a shared file's other slices are known. A target at or
    below the log start changes nothing there."""
    removed: dict[tuple[str, int], SegmentFile] = {}
    rewrites: dict[tuple[str, int], Rewrite] = {}
    for partition, offset in sorted(targets.items()):
        for segment in files.get(partition, ()):
            if segment.max_offset < offset:
                removed[(segment.path, partition)] = segment
            elif segment.min_offset < offset:
                rewrites[(segment.path, partition)] = Rewrite(segment, offset)
    touched = {path for path, _ in (*removed, *rewrites)}
    for partition, entries in files.items():  # the other slices of a file leaving the table go with it
        for segment in entries:
            key = (segment.path, partition)
            if segment.path in touched and key not in removed and key not in rewrites:
                rewrites[key] = Rewrite(segment, segment.min_offset)
    leaving = {**removed, **{key: r.segment for key, r in rewrites.items()}}
    return DeletePlan(tuple(leaving[k] for k in sorted(leaving)), tuple(rewrites[k] for k in sorted(rewrites)))


def delete_topic_records(broker: Broker, topic: str,
                         offsets: Mapping[int, int]) -> dict[int, int | LakelogError]:
    """DeleteRecords on one topic: per partition, the log start afterwards, or the error refusing it (an
    unknown partition, an offset out of range). The valid partitions change in one commit."""
    answers: dict[int, int | LakelogError] = {}
    targets: dict[int, int] = {}
    for partition, offset in offsets.items():
        try:
            high_watermark = broker.list_offset(topic, partition, "latest")  # checks the partition, refreshes
            start = broker.topic_log(topic).log_start_offset(partition)
            targets[partition] = resolve_target(offset, start, high_watermark)
        except LakelogError as exc:
            answers[partition] = exc
    if targets:
        try:
            answers.update(delete_records(broker.committed_log(topic), targets))
        except LakelogError as exc:
            answers.update((p, exc) for p in targets)
    return answers


def delete_records(topic_log: TopicLog, targets: Mapping[int, int]) -> dict[int, int]:
    """Move each partition's log start up to its target (already checked against [0, high watermark]);
    answers every targeted partition's log start afterwards (Kafka's low watermark)."""
    for _ in range(MAX_ROUNDS):
        plan = plan_delete_records(targets, topic_log.all_segments())
        if not plan.changes or _commit(topic_log, plan):
            return {p: topic_log.log_start_offset(p) for p in targets}
    raise StorageWriteFailed(f"records of {topic_log.name!r} not deleted: maintenance jobs kept removing the "
                             f"files first ({MAX_ROUNDS} attempts); retry")


def _commit(topic_log: TopicLog, plan: DeletePlan) -> bool:
    """Write the rewritten entries, then commit them with the removals; False when another commit removed
    one of the files first (the new files are deleted: nothing references them)."""
    written = [_rewrite(topic_log, r) for r in plan.rewrites]
    adds = [AddAction(o.path, o.size_bytes, topic_log.layout.partition_values(o.partition), o.modification_time_ms,
                      True, o.stats) for result in written for o in result.outputs]
    try:
        if topic_log.commit_file_changes(adds, list(plan.removed), data_change=True, job=JOB):
            log.info("deleted records of %s: log start now %s", topic_log.name,
                     {p: topic_log.log_start_offset(p) for p in {s.partition for s in plan.removed}})
            return True
    except Exception:
        _discard(topic_log, adds)
        raise
    _discard(topic_log, adds)
    return False


def _rewrite(topic_log: TopicLog, rewrite: Rewrite) -> RewriteResult:
    segment = rewrite.segment
    finished = not segment.shared and is_segment(segment)  # a finished segment stays one; a slice is intake
    return merge_segments(topic_log.storage, topic_log.uri, topic_log.layout, segment.partition, [rewrite.bounded],
                          segment.size_bytes, finished)


def _discard(topic_log: TopicLog, adds: list[AddAction]) -> None:
    topic_log.storage.delete_files([f"{topic_log.uri}/{a.path}" for a in adds])
