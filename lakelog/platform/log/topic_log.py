"""`TopicLog`: one topic's partitioned log, put together from collaborators that each own their state (one
concept a module of this package, see its docstring), its table's creation, and the calls the rest of lakelog
makes on it, each handed to the collaborator that answers it.

The shared state and who guards it: the log lock (an RLock, made here and handed to the collaborators that take
it) guards the snapshot and what this node derives from it (`LogSnapshot`: the Delta snapshot and its version,
the segment index, the log end offsets and app versions derived from this node's commits), the producers other
writers committed (`OtherWriters`), the entries of the files holding several partitions (`FileSlices`), and
each commit attempt (appends, reservations and fills, maintenance and schema commits); the checkpointer's
condition guards its scheduling fields only; `Footers` has its own lock for the footer cache.
`create_table`, `seal_for_delete` and `table_is_empty` are static: the caller's thread, no log open.
"""

from __future__ import annotations

import logging
import threading
import uuid
from concurrent.futures import Future
from typing import Callable, ContextManager, Mapping, TypeVar

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, Schema
from deltalake.transaction import AddAction

from lakelog.platform.deadline import Deadline
from lakelog.platform.delta.checkpoint import CheckpointState, first_checkpoint
from lakelog.platform.delta.delta_log import (
    COMMIT_ID,
    DELTA_LOG,
    checkpoint_name,
    commit_name,
    commit_uri,
    encode_commit,
    encode_create,
    file_version,
)
from lakelog.platform.delta.outside_commits import OutsideWatch
from lakelog.platform.delta.outside_repair import RepairedPartition
from lakelog.platform.delta.table_retention import DEFAULT_FILE_DELETE_DELAY_MS, retention_properties
from lakelog.platform.errors import TopicAlreadyExists
from lakelog.platform.layout import topic_path
from lakelog.platform.log.checkpoints import CHECKPOINT_INTERVAL, TOPIC_TABLE_PROPERTIES, Checkpointer
from lakelog.platform.log.commit import Appended, Appender
from lakelog.platform.log.maintenance import Maintenance
from lakelog.platform.log.offsets import PartitionState
from lakelog.platform.log.producers import OtherWriters
from lakelog.platform.log.read import Footers, LogReader
from lakelog.platform.log.reservations import Reservations, StagedBatch
from lakelog.platform.log.sequencer import Sequencer
from lakelog.platform.log.snapshot import LogSnapshot
from lakelog.platform.log.table_schema import TableSchema
from lakelog.platform.log.tail_cache import TailCache
from lakelog.platform.log.time_index import TimeIndex
from lakelog.platform.records import Marker
from lakelog.platform.segments.file_slices import FileSlices
from lakelog.platform.segments.index import SegmentFile
from lakelog.platform.segments.segment import TableLayout
from lakelog.platform.storage import STORAGE_ERRORS, Storage
from lakelog.platform.typed.column import TypedColumn
from lakelog.schemas import TOPIC_SCHEMA

TOPIC_SCHEMA_JSON = Schema.from_arrow(TOPIC_SCHEMA).to_json()  # the table's schemaString

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs


class TopicLog:
    """One topic's log. Its collaborators, made here with the collaborators each needs (public, read-only):
    `snapshot` (LogSnapshot), `other_writers` (OtherWriters), `checkpointer` (Checkpointer), `sequencer`
    (Sequencer), `reader` (LogReader), `time_index` (TimeIndex), `table_schema` (TableSchema), `appender`
    (Appender), `reservations` (Reservations), `maintenance` (Maintenance); beside the ones from other packages:
    `file_slices`, `outside` (changes made outside lakelog), `tail` (the tail cache), `footers`."""

    def __init__(self, storage: Storage, name: str, tail_cache_bytes: int = 0, leader_epoch: int | None = None) -> None:
        self.storage = storage
        self.leader_epoch = leader_epoch  # recorded with each commit, so replicas can tell stale leaders
        self.name = name
        self.uri = uri = storage.uri(topic_path(name))
        lock = threading.RLock()  # the log lock: see the module's docstring
        self.footers = Footers()
        # Entries of files holding several partitions, and of other tools' files by content, by path.
        self.file_slices = FileSlices(storage, uri, name, lock, self.footers.remember)
        self.outside = OutsideWatch(name, storage, uri, self.file_slices.read)  # changes made outside lakelog
        self.tail = TailCache(tail_cache_bytes)
        # The last checkpoint and the appends since: recorded by the snapshot, planned and installed by checkpoints.
        checkpoint_state = CheckpointState(keep=4 * CHECKPOINT_INTERVAL)
        self.other_writers = OtherWriters(storage, uri, name, lock)
        self.snapshot = LogSnapshot(storage, uri, name, lock, self.file_slices, self.outside, self.tail,
                                    checkpoint_state, self.other_writers)  # opened and loaded
        self.layout = TableLayout.of(self.snapshot.delta_table.metadata().partition_columns)
        self.checkpointer = Checkpointer(storage, uri, name, self.snapshot, checkpoint_state, self.file_slices)
        self.sequencer = Sequencer(storage, uri, self.snapshot, self.checkpointer)
        self.reader = LogReader(storage, uri, name, self.snapshot, self.tail, self.footers)
        self.time_index = TimeIndex(self.snapshot, self.reader)
        self.table_schema = TableSchema(name, lock, self.snapshot, self.sequencer)
        self.appender = Appender(storage, uri, name, self.layout, leader_epoch, lock, self.snapshot, self.sequencer,
                                 self.table_schema, self.other_writers, self.footers, self.tail)
        self.reservations = Reservations(storage, uri, name, self.layout, lock, self.snapshot, self.sequencer)
        self.maintenance = Maintenance(name, self.layout, lock, self.snapshot, self.sequencer)

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

    # ---- the snapshot: loads, offsets, files ------------------------------

    @property
    def version(self) -> int:
        return self.snapshot.version

    def refresh(self, full: bool = False) -> bool:
        return self.snapshot.refresh(full)

    def maybe_refresh(self, max_age_s: float) -> bool:
        return self.snapshot.maybe_refresh(max_age_s)

    def log_end_offset(self, partition: int) -> int:
        return self.snapshot.log_end_offset(partition)

    def log_start_offset(self, partition: int) -> int:
        return self.snapshot.log_start_offset(partition)

    def app_version(self, app_id: str) -> int:
        return self.snapshot.app_version(app_id)

    def partition_state(self, partition: int) -> PartitionState:
        return self.snapshot.partition_state(partition)

    def segments(self, partition: int) -> list[SegmentFile]:
        return self.snapshot.segments(partition)

    def all_segments(self) -> dict[int, list[SegmentFile]]:
        return self.snapshot.all_segments()

    # ---- commits --------------------------------------------------------

    def append(self, records: pa.Table, partitions: np.ndarray, deadline: Deadline,
               app_transaction: tuple[str, int] | None = None, producer_ids: frozenset[int] = frozenset(),
               expect_bases: Mapping[int, int] | None = None) -> Appended | None:
        return self.appender.append(records, partitions, deadline, app_transaction, producer_ids, expect_bases)

    def take_changed_producers(self) -> set[int] | None:
        return self.other_writers.take_changed()

    def typed_type(self) -> pa.StructType | None:
        return self.table_schema.typed_type()

    def commit_file_changes(self, adds: list[AddAction], removes: list[SegmentFile], data_change: bool,
                            job: str = "", info: dict | None = None) -> bool:
        return self.maintenance.commit_file_changes(adds, removes, data_change, job, info)

    def repair_outside_appends(self) -> list[RepairedPartition]:
        return self.maintenance.repair_outside_appends()

    def last_stable_offset(self, partition: int) -> int:
        return self.reservations.last_stable_offset(partition)

    def marker_at(self, partition: int, offset: int) -> Marker | None:
        return self.reservations.marker_at(partition, offset)

    def reserve(self, partition: int, count: int, producer_id: int, number: int, sequence: int,
                deadline: Deadline) -> int:
        return self.reservations.reserve(partition, count, producer_id, number, sequence, deadline)

    def fill(self, partition: int, producer_id: int, number: int,
             batches: list[StagedBatch] | Callable[[], list[StagedBatch]], deadline: Deadline,
             record_producer_id: int, commit: bool) -> bool:
        return self.reservations.fill(partition, producer_id, number, batches, deadline, record_producer_id, commit)

    @property
    def commits(self) -> int:
        return self.sequencer.commits

    @property
    def conflicts(self) -> int:
        return self.sequencer.conflicts

    @property
    def abandoned(self) -> bool:
        """The table is no longer the topic's (deleted, or created again): commit nothing."""
        return self.sequencer.abandoned

    @abandoned.setter
    def abandoned(self, abandoned: bool) -> None:
        self.sequencer.abandoned = abandoned

    @property
    def journal_exclusive(self) -> Callable[[], ContextManager[None]]:
        return self.reservations.journal_exclusive

    @journal_exclusive.setter
    def journal_exclusive(self, exclusive: Callable[[], ContextManager[None]]) -> None:
        self.reservations.journal_exclusive = exclusive  # set by journal/node.py: see Reservations

    @property
    def typed_column(self) -> TypedColumn | None:
        return self.table_schema.typed_column

    @typed_column.setter
    def typed_column(self, column: TypedColumn | None) -> None:
        self.table_schema.typed_column = column  # set by the topic's owner (open_topic.py)

    # ---- reads ----------------------------------------------------------

    def read(self, partition: int, offset: int, max_records: int, max_bytes: int | None = None) -> pa.Table:
        return self.reader.read(partition, offset, max_records, max_bytes)

    def check_served(self, partition: int) -> None:
        self.reader.check_served(partition)

    def gap_end(self, partition: int, offset: int, stable: int) -> int:
        return self.reader.gap_end(partition, offset, stable)

    def read_segment_table(self, segment: SegmentFile, columns: list[str] | None = None) -> pa.Table:
        return self.reader.read_segment_table(segment, columns)

    def producer_history(self, producer_id: int, content: bool = False) -> pa.Table:
        return self.reader.producer_history(producer_id, content)

    def offset_for(self, partition: int, spec: str | int) -> int:
        return self.time_index.offset_for(partition, spec)

    def offset_for_timestamp(self, partition: int, timestamp_ms: int) -> int | None:
        return self.time_index.offset_for_timestamp(partition, timestamp_ms)

    # ---- checkpoints ----------------------------------------------------

    def wait_for_checkpoints(self, timeout_s: float = 30) -> bool:
        return self.checkpointer.wait(timeout_s)

    def close(self, timeout_s: float = 30) -> None:
        """Let the background checkpoint finish, and checkpoint the latest version if this node committed a full
        interval past its last one (`Checkpointer.close`); an abandoned table gets none."""
        self.checkpointer.close(timeout_s, lambda: not self.sequencer.abandoned and self.sequencer.commits > 0)


T = TypeVar("T")


def _started(work: Callable[[], T]) -> Future[T]:
    """`work` on a thread of its own: its result, or its error, in the future."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to whoever waits
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True, name="lakelog-first-checkpoint").start()
    return future
