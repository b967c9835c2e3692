"""The transaction coordinator's state on the root: `_control/transactions`, one row per change of a
transactional id, the latest row per id winning (ordered by `written`, which this store keeps strictly
increasing, as the offsets store keeps `committed`). A change is returned only once its row is durable:
the coordinator answers after that, so a node that takes the id over finds every state a client was told.
Once the rows exceed a bound, the table is rewritten to the latest row per id (store_compaction.py).

A save is a compare-and-set on the id's latest row: it is appended only if that row is still the one the
new state was made from (`Transaction.row_written`), checked on every row appended up to the version the
append then takes (delta-rs is not let retry the commit onto a later version). A node acting on a state
another node changed since (both coordinating the id for a moment, one of them cut off from the cluster
without knowing it yet) stores nothing: TransactionCoordinatorFenced.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import write_deltalake
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import CommitProperties

from lakelog.platform.clock import now_ms
from lakelog.platform.delta.control_table import latest_rows, open_control_table, read_control_table
from lakelog.platform.delta.delta_log import appended, commit_uri
from lakelog.platform.errors import StorageUnavailable
from lakelog.platform.layout import TRANSACTIONS_TABLE
from lakelog.platform.storage import STORAGE_ERRORS, STORAGE_RETRY_PAUSE_S, Storage
from lakelog.platform.transactions.errors import TransactionCoordinatorFenced
from lakelog.platform.transactions.state import PendingOffset, Transaction, TxnState
from lakelog.platform.transactions.store_compaction import MIN_ROWS, Compactor, compaction_due

ONE_ATTEMPT = CommitProperties(max_commit_retries=0)  # the version after the one checked, or none

TRANSACTIONS_SCHEMA = pa.schema([
    pa.field("transactional_id", pa.string(), nullable=False),
    pa.field("producer_id", pa.int64(), nullable=False),
    pa.field("producer_epoch", pa.int32(), nullable=False),
    pa.field("last_producer_id", pa.int64(), nullable=False),
    pa.field("last_producer_epoch", pa.int32(), nullable=False),
    pa.field("number", pa.int64(), nullable=False),
    pa.field("state", pa.string(), nullable=False),
    pa.field("timeout_ms", pa.int32(), nullable=False),
    pa.field("started_ms", pa.int64(), nullable=False),
    pa.field("updated_ms", pa.int64(), nullable=False),
    pa.field("partitions", pa.string(), nullable=False),  # JSON [[topic, partition], ...]
    pa.field("groups", pa.string(), nullable=False),  # JSON [group, ...]
    pa.field("offsets", pa.string(), nullable=False),  # JSON [[group, topic, partition, offset, metadata], ...]
    pa.field("written", pa.int64(), nullable=False),  # ms, strictly increasing per writer: the latest row wins
])


class TransactionStore:
    def __init__(self, storage: Storage, timeout_ms: int = 30_000, compact_min_rows: int = MIN_ROWS) -> None:
        self._storage = storage
        self._uri = storage.uri(TRANSACTIONS_TABLE)
        self._dt = open_control_table(storage, TRANSACTIONS_TABLE, TRANSACTIONS_SCHEMA)
        self._compactor = Compactor(storage, storage.uri(TRANSACTIONS_TABLE), TRANSACTIONS_SCHEMA)
        self._compact_min_rows = compact_min_rows
        self._rows = self._ids = 0  # the table's rows and ids at the last read, the rows this store wrote since
        self._timeout_s = timeout_ms / 1000
        self._last_written = 0
        self._known_version = -1  # the table's version after this store's last read or write
        self._latest: dict[str, int] = {}  # id -> `written` of its latest row, as of version `_scanned`
        self._scanned = -1
        self._lock = threading.Lock()  # one append at a time: `written` stays increasing

    def changed_elsewhere(self) -> bool:
        """Whether another node wrote the table since this store last read or wrote it."""
        self._dt.update_incremental()
        return self._dt.version() != self._known_version

    def load(self) -> dict[str, Transaction]:
        """Every transactional id's latest state."""
        self._dt.update_incremental()
        version = self._known_version = self._dt.version()
        rows = self._read_latest()
        with self._lock:
            self._adopt(rows, version)
        self._ids = rows.num_rows
        return {row["transactional_id"]: _from_row(row) for row in rows.to_pylist()}

    def _read_latest(self) -> pa.Table:
        """The latest row of each id: the table read whole."""
        rows = read_control_table(self._storage, self._dt) if self._dt.version() > 0 else \
            TRANSACTIONS_SCHEMA.empty_table()
        self._rows = rows.num_rows
        return latest_rows(rows, ["transactional_id"], ["written"])

    def save(self, txn: Transaction) -> Transaction:
        """Append the id's new state if the id's latest row is still the one `txn` was made from (else
        TransactionCoordinatorFenced); returns the state as stored, once durable (StorageUnavailable past
        the timeout)."""
        deadline = time.monotonic() + self._timeout_s
        with self._lock:
            written = None
            while True:
                try:
                    latest = self._latest_written(txn.transactional_id)
                    if written is not None and latest == written:
                        break  # the attempt before landed; only its answer was lost
                    if latest != txn.row_written:
                        raise TransactionCoordinatorFenced(
                            f"transactional id {txn.transactional_id!r}: its state was changed by another node "
                            f"since this one read it (latest row written at {latest}, this change made from "
                            f"{txn.row_written})")
                    written = max(now_ms(), self._last_written + 1)
                    table = pa.Table.from_pylist([_to_row(txn, written)], schema=TRANSACTIONS_SCHEMA)
                    write_deltalake(self._dt, table, mode="append", commit_properties=ONE_ATTEMPT)
                    break
                except STORAGE_ERRORS as exc:
                    if time.monotonic() >= deadline:
                        raise StorageUnavailable(
                            f"could not store transaction {txn.transactional_id!r}: {exc}") from exc
                    if not isinstance(exc, CommitFailedError):  # another append took the version: checked again
                        time.sleep(STORAGE_RETRY_PAUSE_S)
                    try:
                        self._dt.update_incremental()
                    except STORAGE_ERRORS:
                        pass
            self._last_written = written
            self._latest[txn.transactional_id] = written
            self._rows += 1
            if self._scanned == self._dt.version() - 1:
                self._scanned = self._dt.version()
            if self._known_version == self._dt.version() - 1:
                self._known_version = self._dt.version()  # ours, right after what was read: nothing missed
        return replace(txn, row_written=written)

    def _latest_written(self, transactional_id: str) -> int:
        """The `written` of the id's latest row (0: none), every row up to the table's current version
        scanned: the compare of the compare-and-set (under the append lock)."""
        self._scan()
        return self._latest.get(transactional_id, 0)

    def _scan(self) -> None:
        """The rows appended since the last scan, commit by commit (a compaction only rewrites rows appended
        before it); the table read whole the first time, or when a commit file is no longer there."""
        self._dt.update_incremental()
        version = self._dt.version()
        if self._scanned < 0:
            self._adopt(self._read_latest(), version)
            return
        for number in range(self._scanned + 1, version + 1):
            try:
                found = appended(self._storage.read_bytes(commit_uri(self._uri, number)))
            except FileNotFoundError:  # cleaned from the log
                self._adopt(self._read_latest(), version)
                return
            for add in found[0] if found is not None else ():
                with self._storage.open_input(f"{self._uri}/{unquote(add.path)}") as source:
                    self._note(pq.read_table(source, columns=["transactional_id", "written"], pre_buffer=False,
                                             use_threads=False))
        self._scanned = version

    def _adopt(self, latest: pa.Table, version: int) -> None:
        """The latest rows read whole at `version` (under the append lock); ignored if older than a scan."""
        if version >= self._scanned:
            self._latest = {}
            self._note(latest)
            self._scanned = version

    def _note(self, rows: pa.Table) -> None:
        for transactional_id, written in zip(rows.column("transactional_id").to_pylist(),
                                             rows.column("written").to_pylist()):
            self._latest[transactional_id] = max(written, self._latest.get(transactional_id, 0))
            self._last_written = max(self._last_written, written)

    def compact_if_due(self) -> bool:
        """Rewrite the table to the latest row per id when its rows (as this store knows them) exceed the
        bound; False when not due or another rewrite came first (the next call reads again)."""
        if not compaction_due(self._rows, self._ids, self._compact_min_rows):
            return False
        # Not under the append lock: an append meanwhile stays beside the rewrite (store_compaction.py).
        self._dt.update_incremental()
        version = self._dt.version()
        compacted = self._compactor.compact(version)
        if compacted is None:
            self._rows = self._ids = 0  # counted again at the next read
            return False
        self._dt.update_incremental()
        self._rows = self._ids
        if self._known_version == version and compacted == version + 1 and self._dt.version() == compacted:
            self._known_version = compacted  # its own rewrite right after the read: the latest rows are the same
        return True


def _to_row(txn: Transaction, written: int) -> dict:
    return {
        "transactional_id": txn.transactional_id, "producer_id": txn.producer_id,
        "producer_epoch": txn.producer_epoch, "last_producer_id": txn.last_producer_id,
        "last_producer_epoch": txn.last_producer_epoch, "number": txn.number, "state": txn.state.value,
        "timeout_ms": txn.timeout_ms, "started_ms": txn.started_ms, "updated_ms": txn.updated_ms,
        "partitions": json.dumps(sorted(txn.partitions)), "groups": json.dumps(sorted(txn.groups)),
        "offsets": json.dumps([[o.group, o.topic, o.partition, o.offset, o.metadata] for o in txn.offsets]),
        "written": written,
    }


def _from_row(row: dict) -> Transaction:
    return Transaction(
        transactional_id=row["transactional_id"], producer_id=row["producer_id"],
        producer_epoch=row["producer_epoch"], timeout_ms=row["timeout_ms"], state=TxnState(row["state"]),
        number=row["number"], last_producer_id=row["last_producer_id"],
        last_producer_epoch=row["last_producer_epoch"], started_ms=row["started_ms"], updated_ms=row["updated_ms"],
        partitions=frozenset((t, int(p)) for t, p in json.loads(row["partitions"])),
        groups=frozenset(json.loads(row["groups"])),
        offsets=tuple(PendingOffset(g, t, int(p), int(o), m) for g, t, p, o, m in json.loads(row["offsets"])),
        row_written=row["written"],
    )
