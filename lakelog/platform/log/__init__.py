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

`TopicLog` (topic_log.py: the table's creation, and the log put together) is built from collaborators that
each own their state, made in its `__init__` with the collaborators they need, each class's docstring saying
which thread may call it and under which lock:
`LogSnapshot` (snapshot.py: the Delta snapshot opened, followed and refreshed, the index rebuilt from it, the
log start and end offsets, app versions and the index's files), `OtherWriters` (producers.py: the producers
other writers' commits wrote), `Checkpointer` (checkpoints.py: checkpoints and log cleanup, on the maintenance
thread), `Sequencer` (sequencer.py: the put-if-absent of the next version, the commit counters), `Appender`
(commit.py: the append path and its conflicts), `TableSchema` (table_schema.py: the typed column's schema),
`Reservations` (reservations.py: transactions' reservations and fills), `Maintenance` (maintenance.py: the
jobs' file changes), `LogReader` and `Footers` (read.py: fetch waves, holes, byte limits, a producer's
history; the footer cache), `TimeIndex` (time_index.py: offsets by timestamp). None inherits from another.

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
