"""`TopicLog`: one topic's partitioned log, put together from its parts (one concept a module of this
package, each a mixin whose methods use the state set up here), its table's creation, and its state.

The shared state and who guards it: the log lock `_lock` (an RLock) guards the snapshot (`_dt`,
`_version`), the segment index, the log end offsets and app versions derived from this node's commits
(`_leo`, `_apps`) and the producers other writers committed (`_foreign`, `_changed_producers`); the
condition `_checkpoints` guards the checkpoint scheduling fields only; `_metadata_lock` the footer cache.
`create_table`, `seal_for_delete` and `table_is_empty` are static: the caller's thread, no log open.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import Future
from contextlib import nullcontext
from typing import Callable, ContextManager

import pyarrow.parquet as pq
from deltalake import DeltaTable, Schema

from lakelog.platform.delta.checkpoint import CheckpointState, first_checkpoint
from lakelog.platform.delta.delta_log import (
    COMMIT_ID, DELTA_LOG, checkpoint_name, commit_name, commit_uri, encode_commit, encode_create, file_version,
)
from lakelog.platform.errors import TopicAlreadyExists
from lakelog.platform.segments.file_slices import FileSlices
from lakelog.platform.segments.index import SegmentIndex
from lakelog.platform.layout import topic_path
from lakelog.platform.log.checkpoints import CHECKPOINT_INTERVAL, TOPIC_TABLE_PROPERTIES, Checkpoints
from lakelog.platform.log.commit import Commits
from lakelog.platform.log.maintenance import Maintenance
from lakelog.platform.log.offsets import Offsets
from lakelog.platform.log.producers import Producers
from lakelog.platform.log.read import Reads
from lakelog.platform.log.reservations import Reservations
from lakelog.platform.log.snapshot import Snapshot
from lakelog.platform.log.table_schema import TableSchema
from lakelog.platform.log.time_index import TimeIndex
from lakelog.platform.delta.outside_commits import OutsideWatch
from lakelog.platform.segments.segment import TableLayout
from lakelog.platform.storage import STORAGE_ERRORS, Storage
from lakelog.platform.delta.table_retention import DEFAULT_FILE_DELETE_DELAY_MS, retention_properties
from lakelog.platform.broker.tail_cache import TailCache
from lakelog.schemas import TOPIC_SCHEMA

TOPIC_SCHEMA_JSON = Schema.from_arrow(TOPIC_SCHEMA).to_json()  # the table's schemaString

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs


class TopicLog(Snapshot, Offsets, Commits, TableSchema, Producers, Checkpoints, Maintenance, Reads, TimeIndex,
               Reservations):
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
        # With the node journal on (set by journal/node.py), which assigns this topic's offsets from memory:
        # a reservation takes offsets inside it (its acknowledged entries committed first, no flush meanwhile).
        self.journal_exclusive: Callable[[], ContextManager[None]] = nullcontext
        self.abandoned = False  # the table is no longer the topic's (deleted, or created again): commit nothing
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
        """Create the topic's table (`create_version_0`), with its first checkpoint."""
        checkpoint = TopicLog.create_version_0(storage, name, layout, file_delete_delay_ms)
        if checkpoint is not None:
            checkpoint()

    @staticmethod
    def create_version_0(storage: Storage, name: str, layout: TableLayout = TableLayout.INTAKE,
                         file_delete_delay_ms: int = DEFAULT_FILE_DELETE_DELAY_MS) -> Callable[[], None] | None:
        """Create the topic's table: its version 0, with one put-if-absent, and the log folder listed at the
        same time (one round trip; delta-rs's create lists first and loads the new table back: about 20
        requests on S3). Never deletes another's files: an empty table (another node creating the same
        topic) is reused; a folder holding later commits (a deleted topic's, or a live table whose log was
        cleaned of its version 0) is refused, and a version 0 this call put beside them is taken back.

        Answers the writing of the first checkpoint (one PUT; the base of the writer's own checkpoints,
        platform/delta/checkpoint.py) when this call created the table, for the caller to run beside its next
        request; None when an empty table was reused."""
        uri = storage.uri(topic_path(name))
        properties = {**TOPIC_TABLE_PROPERTIES, **retention_properties(file_delete_delay_ms)}  # vacuum's delay
        version_0 = encode_create(name, TOPIC_SCHEMA_JSON, layout.partition_by or [], properties)
        listing = _started(lambda: storage.list_names_after(f"{uri}/{DELTA_LOG}", commit_name(0)))
        checkpoint = _started(lambda: first_checkpoint(version_0))  # CPU (5-25 ms) while the requests are out
        landed = storage.put_if_absent(commit_uri(uri, 0), version_0)
        former = [n for n in listing.result() if (version := file_version(n)) is not None and version > 0]
        if former and landed:  # nobody reuses a folder holding another log: this version 0 is ours alone
            storage.delete_files([commit_uri(uri, 0)])
        if landed and not former:
            def write_checkpoint() -> None:
                try:
                    storage.write_bytes(f"{uri}/{DELTA_LOG}/{checkpoint_name(0)}", checkpoint.result())
                except Exception as exc:  # optional (delta-rs writes the first one then): never fails a create
                    log.warning("checkpoint of the new table %s not written: %s", name, exc)
            return write_checkpoint
        checkpoint.exception()  # not needed: let it end here, not under the interpreter's exit
        if former or not TopicLog.table_is_empty(storage, name):
            raise TopicAlreadyExists(
                f"topic {name!r} is marked for deletion: its former table at {uri} is still being deleted; "
                f"retry, or run `lakelog topics delete {name}` to finish an interrupted delete")
        return None

    @staticmethod
    def seal_for_delete(storage: Storage, name: str, log_names: list[str]) -> str | None:
        """Before the topic's delete commits: a bare table (its log's `log_names` show version 0 alone) gets a
        version 1 that commits nothing, so that no create of the name reuses the table this delete is about to
        remove (it would be a topic without a table). Answers the uri of version 1 when the table was bare
        (the seal, or a writer's commit that won the name first: the delete removes either with the rest); a
        table with later commits, or none, is left as it is (None)."""
        if commit_name(0) not in log_names or any(file_version(n) for n in log_names):
            return None
        uri = commit_uri(storage.uri(topic_path(name)), 1)
        seal = encode_commit([], [], {COMMIT_ID: uuid.uuid4().hex, "lakelog.deletedTopic": name}, None)
        storage.put_if_absent(uri, seal)  # lost to a writer's version 1: not bare either
        return uri

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


def _started(work: Callable[[], bytes]) -> Future[bytes]:
    """`work` on a thread of its own: its result, or its error, in the future."""
    future: Future[bytes] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to whoever waits
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True, name="lakelog-first-checkpoint").start()
    return future
