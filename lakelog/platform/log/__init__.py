"""The partitioned log of one topic: a Delta table, and the Delta log as the offset sequencer.

An append is one Delta commit: its new data (one file for the whole flush in layout 2, one per
partition in layout 1: see segment.py), and one
`SetTransaction("lakelog.partition.<p>", new log end offset)` per partition.
The log end offset of a partition is that transaction's version, read from
the snapshot in O(1). lakelog writes these commits itself (the data files, then
the commit file put only if its version is free); delta-rs reads the snapshot
and writes checkpoints, off the produce path. Two writers of one version
conflict at the put; the loser refreshes and commits again, rewriting its
records only when its offsets moved.

`TopicLog` (topic_log.py: its state, the table's creation) is put together from one part per concept,
each module's docstring saying which thread may call it and under which lock:
`snapshot.py` (open, follow, refresh; the index rebuilt from the snapshot), `offsets.py` (log start and
end offsets, app versions, the index's files), `commit.py` (the append path and its conflicts),
`producers.py` (other writers' producers; a producer's history), `checkpoints.py` (checkpoints and log
cleanup, on the maintenance thread), `maintenance.py` (the jobs' file changes), `read.py` (fetch waves,
holes, byte limits), `time_index.py` (offsets by timestamp).

The tunables tests change are read where they are used: `CLEANUP_DELAY_S` in checkpoints.py,
`SNAPSHOT_MAX_AGE_S` in snapshot.py, `FOREIGN_VERSIONS_MAX` in producers.py.
"""

from lakelog.platform.log.checkpoints import CHECKPOINT_INTERVAL, RETAINED_COMMITS, TOPIC_TABLE_PROPERTIES
from lakelog.platform.log.commit import Appended
from lakelog.platform.log.offsets import PartitionState, partition_app_id
from lakelog.platform.log.read import READ_PARALLELISM, in_file_schema, read_wave, without_holes
from lakelog.platform.log.topic_log import TopicLog

__all__ = [
    "CHECKPOINT_INTERVAL",
    "READ_PARALLELISM",
    "RETAINED_COMMITS",
    "TOPIC_TABLE_PROPERTIES",
    "Appended",
    "PartitionState",
    "TopicLog",
    "in_file_schema",
    "read_wave",
    "without_holes",
    "partition_app_id",
]
