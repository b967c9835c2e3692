"""What each maintenance job does to a topic, planned from file statistics alone: no Spark, no I/O.

A planner takes a topic's metadata, its segments per partition (from the Delta snapshot) and the time,
and answers one `PartitionPlan` per partition to change. The Spark jobs (`spark_jobs/jobs.py`) execute
the plans; any other executor could.

Retention (`cleanup.policy` contains delete) removes closed segments past their limits:

Metadata only: the files leave the table in one commit per partition, no
data is rewritten, and the log start offset (the lowest offset of the
remaining files) advances. Files are removed oldest first, as a prefix of
the partition, so the log stays contiguous:
- `retention.ms`: closed segments whose newest record is older than that;
- `retention.bytes`: the oldest closed segments while the partition is over it;
- `retention.topic.bytes`: then, while the whole topic is over it, the oldest
  closed segment of any partition (a per-partition limit grows with every
  partition added; this one does not).
The active segment (highest offsets) is never removed. Physical deletion
waits for `file.delete.delay.ms` (the vacuum job).

Segment roll merges consecutive small files into segments of about `segment.bytes` (records, offsets
and order unchanged); log compaction (`cleanup.policy` contains compact) keeps the latest record per key
in closed segments older than `min.compaction.lag.ms` (see `plan.py` and `rewrite.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lakelog.compaction.plan import closed_segments, plan_compaction, plan_roll
from lakelog.platform.catalog.catalog import TopicMeta
from lakelog.platform.segments.index import SegmentFile

Segments = Callable[[int], list[SegmentFile]]  # partition -> its files, sorted by offset


@dataclass(frozen=True)
class PartitionPlan:
    topic: str
    partition: int
    job: str  # retention | roll | compact
    inputs: tuple[SegmentFile, ...]
    groups: tuple[tuple[str, ...], ...]  # input paths rewritten together (roll and compact)
    description: str
    target_bytes: int = 0
    delete_retention_ms: int = 0
    finished: tuple[bool, ...] = ()  # roll: per group, whether its output is a finished segment

    def summary(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "job": self.job, "files": len(self.inputs),
                "bytes": sum(f.size_bytes for f in self.inputs), "plan": self.description}


def plan_retention(meta: TopicMeta, segments: Segments, now_ms: int) -> list[PartitionPlan]:
    config = meta.config
    if not config.deletes:
        return []
    remaining: dict[int, list[SegmentFile]] = {}
    removed: dict[int, list[SegmentFile]] = {}
    for p in range(meta.partitions):
        files = segments(p)
        closed = closed_segments(files)
        drop = _expired_prefix(closed, config.retention_ms, now_ms)
        drop += _over_bytes(closed[len(drop):], files, drop, config.retention_bytes)
        removed[p] = drop
        remaining[p] = files[len(drop):]
    if config.retention_topic_bytes >= 0:
        _topic_cap(remaining, removed, config.retention_topic_bytes)
    return [PartitionPlan(meta.name, p, "retention", tuple(files), (), _reason(files))
            for p, files in sorted(removed.items()) if files]


def _expired_prefix(closed: list[SegmentFile], retention_ms: int, now_ms: int) -> list[SegmentFile]:
    if retention_ms < 0:
        return []
    drop = []
    for segment in closed:
        if now_ms - segment.max_timestamp_ms <= retention_ms:
            break  # stop at the first segment still retained, as Kafka does
        drop.append(segment)
    return drop


def _over_bytes(candidates: list[SegmentFile], files: list[SegmentFile], dropped: list[SegmentFile],
                retention_bytes: int) -> list[SegmentFile]:
    if retention_bytes < 0:
        return []
    size = sum(f.size_bytes for f in files) - sum(f.size_bytes for f in dropped)
    drop = []
    for segment in candidates:
        if size <= retention_bytes:
            break
        drop.append(segment)
        size -= segment.size_bytes
    return drop


def _topic_cap(remaining: dict[int, list[SegmentFile]], removed: dict[int, list[SegmentFile]], cap: int) -> None:
    """Remove the globally oldest closed segment until the topic fits under `cap`."""
    size = sum(f.size_bytes for files in remaining.values() for f in files)
    while size > cap:
        heads = [(files[0].max_timestamp_ms, p) for p, files in remaining.items()
                 if len(files) > 1 and not files[0].shared]
        if not heads:
            return  # only active segments left
        _, p = min(heads)
        segment = remaining[p].pop(0)
        removed[p].append(segment)
        size -= segment.size_bytes


def _reason(files: list[SegmentFile]) -> str:
    return f"remove {len(files)} files ({sum(f.size_bytes for f in files)} bytes), offsets " \
           f"{files[0].min_offset}..{files[-1].max_offset}"


def plan_log_compaction(meta: TopicMeta, segments: Segments, now_ms: int) -> list[PartitionPlan]:
    config = meta.config
    if not config.compacts:
        return []
    plans = []
    for p in range(meta.partitions):
        plan = plan_compaction(p, segments(p), config.min_compaction_lag_ms, config.segment_bytes, now_ms)
        if plan is not None:
            plans.append(PartitionPlan(meta.name, p, "compact", plan.inputs, (tuple(f.path for f in plan.inputs),),
                                       f"compact {len(plan.inputs)} files ({plan.size_bytes} bytes), offsets "
                                       f"{plan.inputs[0].min_offset}..{plan.inputs[-1].max_offset}",
                                       config.segment_bytes, config.delete_retention_ms))
    return plans


def plan_segment_roll(meta: TopicMeta, segments: Segments, now_ms: int) -> list[PartitionPlan]:
    plans = []
    for p in range(meta.partitions):
        groups = plan_roll(p, segments(p), meta.config.segment_bytes, meta.config.segment_ms, now_ms)
        if groups:
            inputs = tuple(f for g in groups for f in g.inputs)
            parts = tuple(tuple(f.path for f in g.inputs) for g in groups)
            plans.append(PartitionPlan(meta.name, p, "roll", inputs, parts,
                                       f"merge {len(inputs)} files ({sum(f.size_bytes for f in inputs)} bytes) "
                                       f"into {len(groups)} group(s) of about {meta.config.segment_bytes} bytes",
                                       meta.config.segment_bytes,
                                       finished=tuple(g.reason != "intake" for g in groups)))
    return plans


PLANNERS: dict[str, Callable[[TopicMeta, Segments, int], list[PartitionPlan]]] = {
    "retention": plan_retention, "roll": plan_segment_roll, "compact": plan_log_compaction,
}
