"""How long a topic table keeps what a Delta reader needs for time travel, and the properties that say so.

A Delta reader reads version v of a table from its commit files (from a checkpoint at or before v) and the
data files v references. lakelog deletes both on its own schedule: the commit files once a checkpoint made
at least LOG_KEPT_S ago covers them and 100 newer versions exist (`Checkpointer._clean_log`,
log/checkpoints.py), and removed data files once they were removed longer ago than the topic's
`file.delete.delay.ms` (the vacuum job). The table's properties advertise exactly that, in Delta's own
terms, so a reader (and a Delta engine's own VACUUM, which honours `delta.deletedFileRetentionDuration`)
can rely on them:

- `delta.logRetentionDuration`: LOG_KEPT_S. The count of versions kept on top of it is not expressible as
  a duration, so only the time bound is advertised.
- `delta.deletedFileRetentionDuration`: the topic's `file.delete.delay.ms`, set when the table is created,
  committed again when the config is altered, and re-checked by every vacuum run before it deletes (which
  also brings tables created before this rule, advertising a day, in line).
"""

from __future__ import annotations

import logging
from typing import Callable, Protocol

from deltalake import DeltaTable
from deltalake.transaction import CommitProperties

from lakelog.platform.catalog.topic_config import parse_topic_config
from lakelog.platform.errors import LakelogError
from lakelog.platform.storage import DELTA_COMMIT_RETRIES, STORAGE_ERRORS, Storage

log = logging.getLogger(__name__)

# Commit files younger than this are never deleted (the margin that keeps a cleaned version from looking
# free to a stale writer: log/snapshot.py, SNAPSHOT_MAX_AGE_S), so every version committed within it can be read.
LOG_KEPT_S = 30.0
LOG_RETENTION = "delta.logRetentionDuration"
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
DEFAULT_FILE_DELETE_DELAY_MS = parse_topic_config(None).file_delete_delay_ms


def interval(ms: int) -> str:
    """A duration as Delta's (and Spark's) interval string; whole seconds when exact, else milliseconds."""
    if ms < 0:
        raise ValueError(f"a retention cannot be negative, got {ms} ms")
    return f"interval {ms // 1000} seconds" if ms % 1000 == 0 else f"interval {ms} milliseconds"


def retention_properties(file_delete_delay_ms: int) -> dict[str, str]:
    """The two retention properties of a topic table whose vacuum waits `file_delete_delay_ms`."""
    return {LOG_RETENTION: interval(int(LOG_KEPT_S * 1000)), DELETED_FILE_RETENTION: interval(file_delete_delay_ms)}


class TopicTable(Protocol):
    """Where a topic's table is (a TopicLog)."""

    storage: Storage
    uri: str


def advertise_retention(locate: Callable[[], TopicTable], file_delete_delay_ms: int) -> bool:
    """Commit the retention properties (SET TBLPROPERTIES, through delta-rs) where the table says otherwise;
    True when it committed. Best effort: a failure (the store, the topic deleted meanwhile) is logged, not
    raised, and the next vacuum run, which checks again before it deletes anything, completes it. Until
    then the table advertises the old delay: a longer one only until that run, a shorter one harmlessly."""
    wanted = retention_properties(file_delete_delay_ms)
    table_uri = "?"
    try:
        topic_table = locate()
        table_uri = topic_table.uri
        table = DeltaTable(table_uri, storage_options=topic_table.storage.delta_options())
        current = table.metadata().configuration
        if all(current.get(key) == value for key, value in wanted.items()):
            return False
        table.alter.set_table_properties(wanted, raise_if_not_exists=False,
                                         commit_properties=CommitProperties(max_commit_retries=DELTA_COMMIT_RETRIES))
    except (*STORAGE_ERRORS, LakelogError) as exc:
        log.warning("retention properties of %s not updated: %s", table_uri, exc)
        return False
    log.info("retention properties of %s set to %s", table_uri, wanted)
    return True
