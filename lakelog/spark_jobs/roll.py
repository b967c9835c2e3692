"""Segment roll: merge consecutive small files of a partition into segments of about `segment.bytes`.

Planned from file stats on the driver (`lakelog.compaction.plan_roll`),
merged on executors (`merge_segments`), committed per partition with
`dataChange=false`: the records, their offsets and order are unchanged.
"""

from __future__ import annotations

from lakelog.compaction.plan import plan_roll
from lakelog.platform.catalog import TopicMeta
from lakelog.platform.log import TopicLog
from lakelog.spark_jobs.jobs import PartitionPlan


def plan_segment_roll(meta: TopicMeta, topic_log: TopicLog, now_ms: int) -> list[PartitionPlan]:
    plans = []
    for p in range(meta.partitions):
        groups = plan_roll(p, topic_log.segments(p), meta.config.segment_bytes, meta.config.segment_ms, now_ms)
        if groups:
            inputs = tuple(f for g in groups for f in g.inputs)
            parts = tuple(tuple(f.path for f in g.inputs) for g in groups)
            plans.append(PartitionPlan(meta.name, p, "roll", inputs, parts,
                                       f"merge {len(inputs)} files ({sum(f.size_bytes for f in inputs)} bytes) "
                                       f"into {len(groups)} group(s) of about {meta.config.segment_bytes} bytes",
                                       meta.config.segment_bytes))
    return plans
