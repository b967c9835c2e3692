"""The append path: offsets assigned from the snapshot, the data files written, the commit file put only if
its version is free, conflicts with other writers retried, and the bookkeeping of a commit that landed.

An append is one Delta commit: its new data (one file for the whole flush in layout 2, one per partition
in layout 1: see segment.py), and one `SetTransaction("lakelog.partition.<p>", new log end offset)` per
partition. Two writers of one version conflict at the put; the loser refreshes and commits again,
rewriting its records only when its offsets moved.

Threads: `append` from the appending thread (the topic writer's flush, writer.py, or an exactly-once
produce, broker/node.py), one attempt at a time under the log lock; everything else here runs with the lock
held (the commit applied to the snapshot, `LogSnapshot.apply_commit`, also for a commit another writer made,
followed by snapshot.py).
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pyarrow as pa
from deltalake.transaction import Transaction

from lakelog.platform.deadline import Deadline
from lakelog.platform.delta.delta_log import COMMIT_ID, PRODUCER_IDS, encode_commit
from lakelog.platform.errors import OffsetsMoved, StorageWriteFailed, UnknownTopicOrPartition
from lakelog.platform.log.offsets import partition_app_id
from lakelog.platform.log.producers import OtherWriters
from lakelog.platform.log.read import Footers
from lakelog.platform.log.sequencer import Sequencer
from lakelog.platform.log.snapshot import COMMIT_SLICES, LogSnapshot
from lakelog.platform.log.table_schema import TableSchema
from lakelog.platform.log.tail_cache import TailCache
from lakelog.platform.segments.index import SegmentFile, slices_to_commit
from lakelog.platform.segments.segment import TableLayout, Written, write_segments
from lakelog.platform.storage import STORAGE_ERRORS, Storage, is_retriable
from lakelog.platform.typed.column import TYPED_COLUMN

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs


@dataclass(frozen=True)
class Appended:
    """What one append committed: each record's offset (in the order given) and the version holding them."""

    offsets: np.ndarray
    version: int


class Appender:
    """Appends and their commits. It owns no state of the log: the offsets and the index are the snapshot's
    (`LogSnapshot`), the commit counters the sequencer's, the producers other writers wrote `OtherWriters`'; it
    takes the log lock `lock` (handed in by `TopicLog`) for each attempt, so that the bookkeeping after a commit
    sees no other commit in between."""

    def __init__(self, storage: Storage, uri: str, name: str, layout: TableLayout, leader_epoch: int | None,
                 lock: threading.RLock, snapshot: LogSnapshot, sequencer: Sequencer, schema: TableSchema,
                 other_writers: OtherWriters, footers: Footers, tail: TailCache) -> None:
        self.storage = storage
        self.uri = uri
        self.name = name
        self.layout = layout
        self.leader_epoch = leader_epoch  # recorded with each commit, so replicas can tell stale leaders
        self._lock = lock
        self._snapshot = snapshot
        self._sequencer = sequencer
        self._schema = schema
        self._other_writers = other_writers
        self._footers = footers
        self._tail = tail

    def append(self, records: pa.Table, partitions: np.ndarray, deadline: Deadline,
               app_transaction: tuple[str, int] | None = None,
               producer_ids: frozenset[int] = frozenset(),
               expect_bases: Mapping[int, int] | None = None) -> Appended | None:
        """Commit records (TOPIC_FILE_SCHEMA; offsets not yet assigned) to their partitions.

        Offsets are assigned from this node's snapshot; the data files (one per partition, written in
        parallel on object storage) and then the commit file, put only if its version is still free:
        two round trips, and no read of the log in steady state. On a conflict with another writer the
        snapshot is refreshed; if the offsets still hold the same files are committed at the next
        version, else the records are written again with new offsets. With `app_transaction=(app_id,
        version)` the commit also records that SetTransaction, and nothing is written (None is
        returned) when the table already holds that app id at `version` or later: exactly once.

        `producer_ids`: the idempotent producers whose batches the records are, checked by the caller
        against its producer state; recorded in the commit. Before each attempt, commits of other writers
        that this node has not yet checked are read (none in steady state: no extra request), and if one
        wrote any of these producers `ProducerStateChanged` is raised: the caller reloads their state and
        checks its batches again, so a retry committed by another writer is never committed twice.

        `expect_bases`: offsets fixed before the commit (the node journal's): `OffsetsMoved` is raised, and
        nothing committed, unless each partition's log end offset is still its base here.
        """
        order = np.argsort(partitions, kind="stable")  # by partition, arrival order within each
        ordered = records.take(order)
        runs = partition_runs(partitions[order])
        typed = self._schema.typed_values(ordered)  # a typed topic's `value_typed` column (table_schema.py), or None
        written: tuple[dict[int, int], Written] | None = None  # files already written, for these bases
        while True:
            with self._lock:  # one append at a time: the bookkeeping after a commit sees no other in between
                failure = None
                if typed is not None:  # the schema first holds the column's type (before the checks below: a
                    kept, failure = self._schema.holds(typed)  # schema change loads others' commits)
                    if kept is None:
                        typed, written = None, None  # files written with the column are not committed
                if app_transaction is not None and self._snapshot.app_version(app_transaction[0]) >= app_transaction[1]:
                    return None
                if self._sequencer.abandoned:  # a new topic of the name may own the folder: not a byte is written to it
                    raise UnknownTopicOrPartition(f"unknown topic {self.name!r}: it was deleted; nothing committed")
                failure = failure or self._snapshot.refresh_if_stale() or self._other_writers.check(producer_ids)
                if failure is None:  # else the log or other writers' commits could not be read: try again
                    for p, _, _ in runs:
                        self._snapshot.served(p)  # never offsets another writer's records already hold
                    bases = {p: self._snapshot.log_end_offset(p) for p, _, _ in runs}
                    if expect_bases is not None and bases != dict(expect_bases):
                        raise OffsetsMoved(f"{self.name}: records for offsets from {dict(expect_bases)} found "
                                           f"the log ending at {bases}; not committed")
                    version = self._snapshot.version + 1
                    table, offsets = assign_offsets(ordered, runs, bases)
                    txns = [Transaction(partition_app_id(p), bases[p] + (end - start)) for p, start, end in runs]
                    if app_transaction is not None:
                        txns.append(Transaction(*app_transaction))
                    commit_id = uuid.uuid4().hex
                    try:
                        if written is None or written[0] != bases:
                            written = (bases, self._write_segments(_with_typed(table, typed), runs))
                        landed = self._sequencer.put(
                            version,
                            encode_commit(written[1].adds, txns,
                                          self._commit_metadata(commit_id, producer_ids, written[1].segments),
                                          self.layout.partition_by))
                    except STORAGE_ERRORS as exc:
                        committed = self._sequencer.committed_version(version - 1, commit_id)
                        if committed is not None:
                            return self._landed(table, runs, bases, offsets, order, txns, committed, None)
                        if not is_retriable(exc):
                            raise StorageWriteFailed(
                                f"storage refused the commit to {self.name!r}: {exc}") from None
                        log.warning("storage error committing to %s: %s", self.name, exc)
                        failure = f"storage unavailable: {exc}"
                    else:
                        if landed:
                            return self._landed(table, runs, bases, offsets, order, txns, version, written[1])
                        # Files written for offsets that lose are left unreferenced: the vacuum job deletes
                        # unreferenced files once they are older than any write in flight.
                        self._sequencer.conflicted()
                        log.debug("commit conflict on %s at version %d", self.name, version)
                        failure = "its commits kept conflicting with other writers'"
            self._snapshot.refresh_or_wait(deadline, failure)

    def _write_segments(self, table: pa.Table, runs: list[tuple[int, int, int]]) -> Written:
        try:
            written = write_segments(self.storage, self.uri, table, runs, self.layout)
        except pa.ArrowException as exc:  # data that cannot be stored never will be: not retried
            raise StorageWriteFailed(f"the records of {self.name!r} could not be written: {exc}") from None
        self._snapshot.note_written(written.segments)
        if written.footer is not None:
            self._footers.remember(written.adds[0].path, written.footer)
        return written

    def _landed(self, table: pa.Table, runs: list[tuple[int, int, int]], bases: dict[int, int],
                offsets: np.ndarray, order: np.ndarray, txns: list[Transaction], version: int,
                written: Written | None) -> Appended:
        """Our commit is in the log at `version`, adding `written`; None when it was found there after an
        ambiguous failure (the refreshed snapshot holds it).

        Nothing from here on may fail the append or leave this node's log end offsets behind the
        log: a failure in the bookkeeping re-derives them from the log. Called with the lock held.
        """
        self._sequencer.landed()
        try:
            if written is None:
                self._snapshot.forget_log_ends([p for p, _, _ in runs])
            else:
                self._own_commit(version, written, txns)
        except Exception:
            log.exception("bookkeeping after commit to %s failed; offsets re-read from the log", self.name)
            self._snapshot.resync()
        try:
            files = table.drop_columns(["partition"])
            per_row = files.nbytes / max(files.num_rows, 1)  # measured once: each small slice costs as much
            for p, start, end in runs:
                self._tail.put(p, files.slice(start, end - start), bases[p], int(per_row * (end - start)))
        except Exception:
            log.exception("tail cache of %s not updated; fetches read the files", self.name)
            for p, _, _ in runs:
                self._tail.drop_partition(p)
        in_given_order = np.empty_like(offsets)
        in_given_order[order] = offsets
        return Appended(in_given_order, version)

    def _own_commit(self, version: int, written: Written, txns: list[Transaction]) -> None:
        """What our commit changed, known without reading it back: files, log end offsets, app versions."""
        self._snapshot.apply_commit(version, written.segments, written.adds, txns, ours=True)
        self._sequencer.checkpoint_if_due(version)

    def _commit_metadata(self, commit_id: str, producer_ids: frozenset[int], segments: list[SegmentFile]) -> dict:
        # The producer ids let another writer of the topic tell, from the commit alone, whose state it changed;
        # the slices let a node following the log index a shared file without reading its footer.
        metadata: dict = {COMMIT_ID: commit_id, PRODUCER_IDS: sorted(producer_ids)}
        shared = [s for s in segments if s.shared]
        if shared:
            metadata[COMMIT_SLICES] = slices_to_commit(shared)
        if self.leader_epoch is not None:
            metadata["lakelog.leaderEpoch"] = self.leader_epoch
        return metadata


def _with_typed(table: pa.Table, typed: pa.StructArray | None) -> pa.Table:
    """The flush as written to its files: with the typed column last (not in the tail cache: fetches never
    read it)."""
    return table if typed is None else table.append_column(pa.field(TYPED_COLUMN, typed.type), typed)


def partition_runs(sorted_partitions: np.ndarray) -> list[tuple[int, int, int]]:
    """(partition, start, end) of each run of equal partitions in a sorted array."""
    n = len(sorted_partitions)
    if n == 0:
        return []
    if sorted_partitions[0] == sorted_partitions[-1]:  # one partition, commonly: no array work
        return [(int(sorted_partitions[0]), 0, n)]
    starts = np.concatenate(([0], np.flatnonzero(sorted_partitions[1:] != sorted_partitions[:-1]) + 1))
    ends = np.append(starts[1:], n)
    return [(int(sorted_partitions[s]), int(s), int(e)) for s, e in zip(starts, ends)]


def assign_offsets(ordered: pa.Table, runs: list[tuple[int, int, int]],
                    bases: dict[int, int]) -> tuple[pa.Table, np.ndarray]:
    """The flush as one TOPIC_SCHEMA table (partition by partition, dense offsets from each base)."""
    n = ordered.num_rows
    offsets = np.empty(n, dtype=np.int64)
    partitions = np.empty(n, dtype=np.int32)
    for p, start, end in runs:
        offsets[start:end] = np.arange(bases[p], bases[p] + end - start, dtype=np.int64)
        partitions[start:end] = p
    table = ordered.set_column(ordered.schema.get_field_index("offset"), "offset", pa.array(offsets))
    table = table.add_column(0, pa.field("partition", pa.int32(), nullable=False), pa.array(partitions))
    # One chunk: the delta-rs writer pays per record batch, and a flush of many small calls has many.
    return table.combine_chunks(), offsets
