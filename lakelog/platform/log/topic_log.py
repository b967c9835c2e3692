"""`TopicLog`: one topic's partitioned log, put together from its parts (one concept a module of this
package, each a mixin whose methods use the state set up here), its table's creation, and its state.

The shared state and who guards it: the log lock `_lock` (an RLock) guards the snapshot (`_dt`,
`_version`), the segment index, the log end offsets and app versions derived from this node's commits
(`_leo`, `_apps`) and the producers other writers committed (`_foreign`, `_changed_producers`); the
condition `_checkpoints` guards the checkpoint scheduling fields only; `_metadata_lock` the footer cache.
`create_table` and `table_is_empty` are static: the caller's thread, no log open.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError

from lakelog.platform.checkpoint import CheckpointState
from lakelog.platform.errors import TopicAlreadyExists
from lakelog.platform.file_slices import FileSlices
from lakelog.platform.index import SegmentIndex
from lakelog.platform.layout import topic_path
from lakelog.platform.log.checkpoints import CHECKPOINT_INTERVAL, TOPIC_TABLE_PROPERTIES, Checkpoints
from lakelog.platform.log.commit import Commits
from lakelog.platform.log.maintenance import Maintenance
from lakelog.platform.log.offsets import Offsets
from lakelog.platform.log.producers import Producers
from lakelog.platform.log.read import Reads
from lakelog.platform.log.snapshot import Snapshot
from lakelog.platform.log.time_index import TimeIndex
from lakelog.platform.outside_commits import OutsideWatch
from lakelog.platform.segment import TableLayout
from lakelog.platform.storage import STORAGE_ERRORS, Storage
from lakelog.platform.table_retention import DEFAULT_FILE_DELETE_DELAY_MS, retention_properties
from lakelog.platform.tail_cache import TailCache
from lakelog.schemas import TOPIC_SCHEMA

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs


class TopicLog(Snapshot, Offsets, Commits, Producers, Checkpoints, Maintenance, Reads, TimeIndex):
    def __init__(self, storage: Storage, name: str, tail_cache_bytes: int = 0, leader_epoch: int | None = None) -> None:
        self.storage = storage
        self.leader_epoch = leader_epoch  # recorded with each commit, so replicas can tell stale leaders
        self.name = name
        self.uri = storage.uri(topic_path(name))
        self._lock = threading.RLock()
        self._dt = DeltaTable(self.uri, storage_options=storage.delta_options())
        self.layout = TableLayout.of(self._dt.metadata().partition_columns)
        self._index = SegmentIndex()
        # Entries of files holding several partitions, and of other tools' files by content, by path.
        self._file_slices = FileSlices(storage, self.uri, name, self._lock, self._remember_metadata)
        self._slices = self._file_slices.by_path
        self.outside = OutsideWatch(name, storage, self.uri, self._file_slices.read)  # changes made outside lakelog
        self._checkpoint_state = CheckpointState(keep=4 * CHECKPOINT_INTERVAL)
        self._opened_checkpoint_tried = False
        self._leo: dict[int, int] = {}  # log end offsets known for the current snapshot
        self._apps: dict[str, int] = {}  # app SetTransactions of our commits since the snapshot was current
        self._version = -1
        self._last_refresh = 0.0
        self._synced_at = time.monotonic()  # the snapshot's version was the log's latest then (refresh or commit)
        self._checkpoint_times: list[tuple[float, int]] = []  # (when, version) of this node's checkpoints
        self._metadata: OrderedDict[str, pq.FileMetaData] = OrderedDict()
        self._metadata_lock = threading.Lock()
        self.tail = TailCache(tail_cache_bytes)
        self._cleaned_below: int | None = None
        self._checkpoints = threading.Condition()  # guards the three fields below, not the log
        self._checkpoint_due = -1  # the latest version due for a checkpoint
        self._checkpointed = -1  # the latest version checkpointed (or tried) by this node
        self._checkpointing = False  # a background run is under way
        self.commits = 0
        self.conflicts = 0
        # Versions other writers committed since this node's producer state was last checked against them
        # (inclusive ranges), and the producer ids found in those read so far (None: any producer).
        self._foreign: list[tuple[int, int]] = []
        self._changed_producers: set[int] | None = set()
        self._rebuild_index()
        self._opened_at = self._version

    # ---- table lifecycle -------------------------------------------------

    @staticmethod
    def create_table(storage: Storage, name: str, layout: TableLayout = TableLayout.INTAKE,
                     file_delete_delay_ms: int = DEFAULT_FILE_DELETE_DELAY_MS) -> None:
        """Create the topic's table. Never deletes: an empty table (another node creating the same topic)
        is reused; a table holding commits is the rest of a deleted topic, and creation is refused."""
        uri = storage.uri(topic_path(name))
        properties = {**TOPIC_TABLE_PROPERTIES, **retention_properties(file_delete_delay_ms)}  # vacuum's delay
        try:
            created = DeltaTable.create(uri, schema=TOPIC_SCHEMA, partition_by=layout.partition_by, mode="error",
                                        configuration=properties, storage_options=storage.delta_options(), name=name)
        except CommitFailedError:
            pass  # another creator's version 0 won the put-if-absent (S3)
        except DeltaError as exc:
            # "not found", "no files in log segment": another node's delete is removing the former table's
            # log under us.
            text = str(exc).lower()
            if not any(sign in text for sign in ("already exists", "not found", "no files in log segment")):
                raise
        else:
            try:  # the first base of the checkpoints written from the writer's state (platform/checkpoint.py)
                created.create_checkpoint()
            except STORAGE_ERRORS as exc:
                log.warning("checkpoint of the new table %s not written: %s", name, exc)
            return
        if not TopicLog.table_is_empty(storage, name):
            raise TopicAlreadyExists(
                f"topic {name!r} is marked for deletion: its former table at {uri} is still being deleted; "
                f"retry, or run `lakelog topics delete {name}` to finish an interrupted delete")

    @staticmethod
    def table_is_empty(storage: Storage, name: str) -> bool:
        """Whether the topic's table is a bare version 0 (a create's, reused by the next create); False for
        a table holding commits or a log cut short by a delete in progress."""
        try:
            existing = DeltaTable(storage.uri(topic_path(name)), storage_options=storage.delta_options())
            return existing.version() == 0 and not existing.file_uris()
        except STORAGE_ERRORS:
            return False

    @property
    def version(self) -> int:
        return self._version
