"""Log compaction (`cleanup.policy` contains compact): the latest record per key in closed segments.

The range is the prefix of closed segments older than `min.compaction.lag.ms`
(`lakelog.compaction.plan_compaction`); an executor rewrites it
(`compact_segments`): offsets and order kept, superseded records dropped,
tombstones dropped once older than `delete.retention.ms`.
"""

from __future__ import annotations

from lakelog.compaction.plan import plan_compaction
from lakelog.platform.catalog import TopicMeta
from lakelog.platform.log import TopicLog
from lakelog.spark_jobs.jobs import PartitionPlan


def plan_log_compaction(meta: TopicMeta, topic_log: TopicLog, now_ms: int) -> list[PartitionPlan]:
    config = meta.config
    if not config.compacts:
        return []
    plans = []
    for p in range(meta.partitions):
        plan = plan_compaction(p, topic_log.segments(p), config.min_compaction_lag_ms, config.segment_bytes, now_ms)
        if plan is not None:
            plans.append(PartitionPlan(meta.name, p, "compact", plan.inputs, (tuple(f.path for f in plan.inputs),),
                                       f"compact {len(plan.inputs)} files ({plan.size_bytes} bytes), offsets "
                                       f"{plan.inputs[0].min_offset}..{plan.inputs[-1].max_offset}",
                                       config.segment_bytes, config.delete_retention_ms))
    return plans
