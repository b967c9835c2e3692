"""Planning and rewrite logic of segment roll and log compaction, in pure pyarrow.

`plan` decides from file statistics alone (the Delta snapshot) which files
of a partition to rewrite; `rewrite` reads those files and writes the new
ones. Committing is the caller's job (the Spark jobs, through TopicLog).
"""

from lakelog.compaction.plan import (
    CompactionPlan,
    RollGroup,
    closed_segments,
    plan_compaction,
    plan_roll,
)
from lakelog.compaction.rewrite import RewriteResult, WrittenFile, compact_segments, merge_segments

__all__ = [
    "CompactionPlan", "RewriteResult", "RollGroup", "WrittenFile", "closed_segments", "compact_segments",
    "merge_segments", "plan_compaction", "plan_roll",
]
