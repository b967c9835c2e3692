"""Transactions in a topic's log: offsets reserved at produce, filled when the transaction ends.

A *reservation* is a commit without data: the partition's log end offset moves past a transactional
batch's records (their offsets are taken, never reused) and `lakelog.txn.<pid>.<n>.<p>.<seq>` records
where they start, so a retried batch is answered the same offsets. A *fill* ends a transaction in a
partition: the staged records as a data file at their reserved offsets (commit), or one empty placeholder
file whose statistics cover each range (abort), with `lakelog.txnend.<pid>.<p>` set to the transaction's
number `n`: a reservation of a transaction that ended there is refused, and a fill is done once. The fill
also takes the next offset for the transaction's *marker*, as Kafka's coordinator writes a control batch
at its own offset: an empty file covering that one offset, named after its kind (`marker_kind`), so the
offsets match Kafka's (high watermark, lag) while Delta readers see only records.
`lakelog.open.<p>` is the first offset of the oldest unfilled reservation + 1 (0: none): the partition's
last stable offset, kept in the snapshot so a restarted node knows it without a scan.

Threads: the producing and the completing threads; each attempt under the log lock, like appends
(commit.py), with which they share the put-if-absent sequencing (sequencer.py) and the conflict retry.
"""

from __future__ import annotations

import json
import threading
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake.transaction import AddAction, Transaction

from lakelog.platform.clock import now_ms
from lakelog.platform.deadline import Deadline
from lakelog.platform.delta.delta_log import COMMIT_ID, encode_commit
from lakelog.platform.errors import StorageWriteFailed
from lakelog.platform.log.offsets import TRANSACTIONAL_APP_ID, open_app_id, partition_app_id
from lakelog.platform.log.sequencer import Sequencer
from lakelog.platform.log.snapshot import LogSnapshot
from lakelog.platform.records import Marker
from lakelog.platform.segments.file_stats import iso_ms, segment_of
from lakelog.platform.segments.segment import (
    INTAKE_FILE_SCHEMA,
    SEGMENT_FILE_SCHEMA,
    TableLayout,
    Written,
    data_file_name,
    write_segments,
)
from lakelog.platform.storage import STORAGE_ERRORS, Storage, is_retriable

MARKER_PREFIX = "txn-marker-"  # + "commit-" or "abort-": a transaction marker's placeholder file


def marker_file_name(commit: bool) -> str:
    return f"{MARKER_PREFIX}{'commit' if commit else 'abort'}-{uuid.uuid4()}.parquet"


def marker_kind(path: str) -> bool | None:
    """True for a commit marker's file, False for an abort marker's, None for any other file."""
    name = path.rsplit("/", 1)[-1]
    if not name.startswith(MARKER_PREFIX):
        return None
    return name.removeprefix(MARKER_PREFIX).startswith("commit")


class TransactionEnded(Exception):
    """The transaction already ended in this partition: a late or zombie batch (the caller answers
    INVALID_TXN_STATE / PRODUCER_FENCED)."""


def reservation_app_id(producer_id: int, number: int, partition: int, sequence: int) -> str:
    return f"lakelog.txn.{producer_id}.{number}.{partition}.{sequence}"


def txn_end_app_id(producer_id: int, partition: int) -> str:
    return f"lakelog.txnend.{producer_id}.{partition}"


@dataclass(frozen=True)
class StagedBatch:
    """A transactional batch staged outside the table: its sequence (its reservation's key), its record
    count, and how to read its records (TOPIC_FILE_SCHEMA; offsets are set here) when the transaction
    commits; `load` None: it aborted."""

    sequence: int
    count: int
    load: Callable[[], pa.Table] | None


class Reservations:
    """Reservations and fills. Its one state is `journal_exclusive`: with the node journal on (set by
    journal/node.py), which assigns this topic's offsets from memory, a reservation takes offsets inside it (its
    acknowledged entries committed first, no flush meanwhile). The offsets and files are the snapshot's, read
    and committed under the log lock `lock` (handed in by `TopicLog`)."""

    def __init__(self, storage: Storage, uri: str, name: str, layout: TableLayout, lock: threading.RLock,
                 snapshot: LogSnapshot, sequencer: Sequencer) -> None:
        self.storage = storage
        self.uri = uri
        self.name = name
        self.layout = layout
        self._lock = lock
        self._snapshot = snapshot
        self._sequencer = sequencer
        self.journal_exclusive: Callable[[], ContextManager[None]] = nullcontext

    def last_stable_offset(self, partition: int) -> int:
        """The first offset of the oldest open transaction's records, else the log end offset."""
        with self._lock:
            first_open = self._snapshot.app_version(open_app_id(partition))
            end = self._snapshot.log_end_offset(partition)
        return min(first_open - 1, end) if first_open > 0 else end

    def marker_at(self, partition: int, offset: int) -> Marker | None:
        """The transaction marker at `offset`; for an aborted range's placeholder (or a table written before
        markers took offsets), an abort marker of its producer. None when no empty file covers it."""
        files = self._snapshot.files_from(partition, offset)
        segment = next((f for f in files if f.min_offset <= offset), None)
        if segment is None or segment.num_records or segment.min_producer_id is None:
            return None
        return Marker(offset, int(segment.min_producer_id), marker_kind(segment.path) is True)

    def reserve(self, partition: int, count: int, producer_id: int, number: int, sequence: int,
                deadline: Deadline) -> int:
        """Take `count` offsets for a staged transactional batch; answers the first. A retry of the same
        batch (producer, transaction, sequence) is answered the offsets of its first reservation."""
        with self.journal_exclusive():
            return self._reserve(partition, count, producer_id, number, sequence, deadline)

    def _reserve(self, partition: int, count: int, producer_id: int, number: int, sequence: int,
                 deadline: Deadline) -> int:
        key = reservation_app_id(producer_id, number, partition, sequence)

        def plan() -> tuple[list[Transaction], int] | int:
            reserved = self._snapshot.app_version(key)
            if reserved > 0:
                return reserved - 1
            if self._snapshot.app_version(txn_end_app_id(producer_id, partition)) >= number:
                raise TransactionEnded(f"transaction {number} of producer {producer_id} already ended in "
                                       f"{self.name}-{partition}")
            first = self._snapshot.log_end_offset(partition)
            txns = [Transaction(partition_app_id(partition), first + count), Transaction(key, first + 1),
                    Transaction(TRANSACTIONAL_APP_ID, 1)]
            if self._snapshot.app_version(open_app_id(partition)) <= 0:
                txns.append(Transaction(open_app_id(partition), first + 1))
            return txns, first

        return self._commit_txns(plan, [], deadline)

    def fill(self, partition: int, producer_id: int, number: int,
             batches: list[StagedBatch] | Callable[[], list[StagedBatch]], deadline: Deadline,
             record_producer_id: int, commit: bool) -> bool:
        """End transaction `number` of `producer_id` in `partition`: the staged batches that hold a
        reservation go in at their reserved offsets (commit), or placeholders cover them (abort; their
        statistics name `record_producer_id`, the Kafka producer id, for the markers fetch answers), and the
        marker takes the log end offset. Reservations are looked up on each attempt's snapshot, so one that
        landed meanwhile is filled too: `batches` may be a callable, asked again at each attempt (a batch is
        staged before its reservation, so a listing made after a reservation is seen holds its batch). False
        when the transaction was already filled here (by this node before a crash, or another). Runs in the
        journal's exclusive section, as a reservation does: the marker's offset is the table's log end."""
        with self.journal_exclusive():
            return self._fill(partition, producer_id, number, batches, deadline, record_producer_id, commit)

    def _fill(self, partition: int, producer_id: int, number: int,
              batches: list[StagedBatch] | Callable[[], list[StagedBatch]], deadline: Deadline,
              record_producer_id: int, commit: bool) -> bool:
        written: tuple[list[tuple[int, int]], list[Written]] | None = None
        marked: tuple[int, Written] | None = None

        def plan() -> tuple[list[Transaction], None] | bool:
            nonlocal written, marked
            if self._snapshot.app_version(txn_end_app_id(producer_id, partition)) >= number:
                return False
            ranges = []
            for batch in (batches() if callable(batches) else batches):
                key = reservation_app_id(producer_id, number, partition, batch.sequence)
                first = self._snapshot.app_version(key) - 1
                if first >= 0 and batch.count > 0:
                    ranges.append((first, batch))
            covered = sorted((first, first + batch.count - 1) for first, batch in ranges)
            if written is None or written[0] != covered:
                written = (covered, [self._fill_file(partition, record_producer_id, first, batch)
                                     for first, batch in sorted(ranges, key=lambda r: r[0])])
            marker = self._snapshot.log_end_offset(partition)
            if marked is None or marked[0] != marker:
                marked = (marker, self._placeholder(partition, record_producer_id, marker, marker,
                                                    marker_file_name(commit)))
            txns = [Transaction(txn_end_app_id(producer_id, partition), number),
                    Transaction(partition_app_id(partition), marker + 1),
                    Transaction(open_app_id(partition), self._next_open(partition, [*covered, (marker, marker)]) + 1)]
            return txns, None

        def files() -> list[Written]:
            return [*(written[1] if written else []), *([marked[1]] if marked else [])]

        return self._commit_txns(plan, files, deadline) is not False

    # ---- the commits ----------------------------------------------------------

    def _commit_txns(self, plan: Callable[[], Any], files: Callable[[], list[Written]] | list[Written],
                     deadline: Deadline) -> Any:
        """Put one commit of `plan()`'s SetTransactions (and `files`' adds) at the next version, retried on
        conflict with the plan made again on the refreshed snapshot. `plan` answers a final result instead
        when nothing is to be committed."""
        while True:
            with self._lock:
                failure = self._snapshot.refresh_if_stale()
                if failure is None:
                    planned = plan()
                    if not isinstance(planned, tuple):
                        return planned
                    txns, result = planned
                    written = files() if callable(files) else files
                    adds = [a for w in written for a in w.adds]
                    segments = [s for w in written for s in w.segments]
                    version = self._snapshot.version + 1
                    metadata: dict[str, Any] = {COMMIT_ID: uuid.uuid4().hex, "lakelog.transaction": True}
                    try:
                        landed = self._sequencer.put(version, encode_commit(adds, txns, metadata,
                                                                            self.layout.partition_by))
                    except STORAGE_ERRORS as exc:
                        if self._sequencer.committed_version(version - 1, metadata[COMMIT_ID]) is not None:
                            return result  # it landed; the refresh took its SetTransactions in
                        if not is_retriable(exc):
                            raise StorageWriteFailed(f"storage refused the commit to {self.name!r}: {exc}") from None
                        failure = f"storage unavailable: {exc}"
                    else:
                        if landed:
                            self._sequencer.landed()
                            self._snapshot.apply_commit(version, segments, adds, txns, ours=True)
                            self._sequencer.checkpoint_if_due(version)
                            return result
                        self._sequencer.conflicted()
                        failure = "its commits kept conflicting with other writers'"
            self._snapshot.refresh_or_wait(deadline, failure)

    def _next_open(self, partition: int, filling: list[tuple[int, int]]) -> int:
        """The first offset no file (nor a range being filled) covers, from the oldest open reservation:
        the next open transaction's first offset; -1 when every reserved offset is covered."""
        first_open = self._snapshot.app_version(open_app_id(partition)) - 1
        end = self._snapshot.log_end_offset(partition)
        if first_open < 0:
            return -1
        files = self._snapshot.files_from(partition, first_open)
        ranges = sorted([*((f.min_offset, f.max_offset) for f in files), *filling])
        covered = first_open
        for low, high in ranges:
            if low > covered:
                break
            covered = max(covered, high + 1)
        return covered if covered < end else -1

    def _fill_file(self, partition: int, record_producer_id: int, first: int, batch: StagedBatch) -> Written:
        if batch.load is None:
            return self._placeholder(partition, record_producer_id, first, first + batch.count - 1)
        records = batch.load()
        if records.num_rows != batch.count:
            raise StorageWriteFailed(f"a staged batch of {self.name}-{partition} holds {records.num_rows} records, "
                                     f"its reservation {batch.count}")
        table = records.set_column(records.schema.get_field_index("offset"), "offset",
                                   pa.array(np.arange(first, first + batch.count, dtype=np.int64)))
        table = table.add_column(0, pa.field("partition", pa.int32(), nullable=False),
                                 pa.array(np.full(batch.count, partition, dtype=np.int32)))
        try:
            return write_segments(self.storage, self.uri, table, [(partition, 0, table.num_rows)], self.layout)
        except pa.ArrowException as exc:
            raise StorageWriteFailed(f"the records of {self.name!r} could not be written: {exc}") from None

    def _placeholder(self, partition: int, producer_id: int, first: int, last: int,
                     name: str | None = None) -> Written:
        """An empty file whose statistics cover an aborted range or a marker (and name its producer): the
        offsets stay covered, so no hole is left where the transaction was, and no reader sees a record."""
        intake = self.layout is TableLayout.INTAKE
        schema = INTAKE_FILE_SCHEMA if intake else SEGMENT_FILE_SCHEMA
        relative = self.layout.file_path(partition, name or data_file_name())
        sink = pa.BufferOutputStream()
        pq.write_table(schema.empty_table(), sink, compression="snappy")
        data = sink.getvalue()
        self.storage.write_bytes(f"{self.uri}/{relative}", data)
        stamp = iso_ms(now_ms())
        low = {"offset": first, "timestamp": stamp, "producer_id": producer_id}
        high = {"offset": last, "timestamp": stamp, "producer_id": producer_id}
        if intake:
            low["partition"] = high["partition"] = partition
        stats = json.dumps({"numRecords": 0, "minValues": low, "maxValues": high,
                            "nullCount": {"key": 0, "value": 0, **({"partition": 0} if intake else {})}})
        action = AddAction(relative, data.size, self.layout.partition_values(partition), now_ms(), True, stats)
        return Written([action], [segment_of(action)])
