"""Retention (`cleanup.policy` contains delete): remove closed segments past their limits.

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
"""

from __future__ import annotations

from lakelog.compaction.plan import closed_segments
from lakelog.platform.catalog import TopicMeta
from lakelog.platform.index import SegmentFile
from lakelog.platform.log import TopicLog
from lakelog.spark_jobs.jobs import PartitionPlan


def plan_retention(meta: TopicMeta, topic_log: TopicLog, now_ms: int) -> list[PartitionPlan]:
    config = meta.config
    if not config.deletes:
        return []
    remaining: dict[int, list[SegmentFile]] = {}
    removed: dict[int, list[SegmentFile]] = {}
    for p in range(meta.partitions):
        files = topic_log.segments(p)
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
        heads = [(files[0].max_timestamp_ms, p) for p, files in remaining.items() if len(files) > 1]
        if not heads:
            return  # only active segments left
        _, p = min(heads)
        segment = remaining[p].pop(0)
        removed[p].append(segment)
        size -= segment.size_bytes


def _reason(files: list[SegmentFile]) -> str:
    return f"remove {len(files)} files ({sum(f.size_bytes for f in files)} bytes), offsets " \
           f"{files[0].min_offset}..{files[-1].max_offset}"
