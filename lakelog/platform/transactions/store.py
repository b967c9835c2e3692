"""The transaction coordinator's state on the root: `_control/transactions`, one row per change of a
transactional id, the latest row per id winning (ordered by `written`, which this store keeps strictly
increasing, as the offsets store keeps `committed`). A change is returned only once its row is durable:
the coordinator answers after that, so a node that takes the id over finds every state a client was told.
Once the rows exceed a bound, the table is rewritten to the latest row per id (store_compaction.py).
"""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa
from deltalake import write_deltalake

from lakelog.platform.clock import now_ms
from lakelog.platform.control_table import latest_rows, open_control_table, read_control_table
from lakelog.platform.errors import StorageUnavailable
from lakelog.platform.layout import TRANSACTIONS_TABLE
from lakelog.platform.storage import STORAGE_ERRORS, STORAGE_RETRY_PAUSE_S, Storage
from lakelog.platform.transactions.state import PendingOffset, Transaction, TxnState
from lakelog.platform.transactions.store_compaction import MIN_ROWS, Compactor, compaction_due

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
        self._dt = open_control_table(storage, TRANSACTIONS_TABLE, TRANSACTIONS_SCHEMA)
        self._compactor = Compactor(storage, storage.uri(TRANSACTIONS_TABLE), TRANSACTIONS_SCHEMA)
        self._compact_min_rows = compact_min_rows
        self._rows = self._ids = 0  # the table's rows and ids at the last read, the rows this store wrote since
        self._timeout_s = timeout_ms / 1000
        self._last_written = 0
        self._known_version = -1  # the table's version after this store's last read or write
        self._lock = threading.Lock()  # one append at a time: `written` stays increasing

    def changed_elsewhere(self) -> bool:
        """Whether another node wrote the table since this store last read or wrote it."""
        self._dt.update_incremental()
        return self._dt.version() != self._known_version

    def load(self) -> dict[str, Transaction]:
        """Every transactional id's latest state."""
        self._dt.update_incremental()
        self._known_version = self._dt.version()
        if self._dt.version() <= 0:
            return {}
        rows = read_control_table(self._storage, self._dt)
        self._rows = rows.num_rows
        if rows.num_rows == 0:
            return {}
        rows = latest_rows(rows, ["transactional_id"], ["written"])
        self._ids = rows.num_rows
        self._last_written = max(self._last_written, max(rows.column("written").to_pylist()))
        return {row["transactional_id"]: _from_row(row) for row in rows.to_pylist()}

    def save(self, txn: Transaction) -> None:
        """Append the id's new state; returns once it is durable (StorageUnavailable past the timeout)."""
        deadline = time.monotonic() + self._timeout_s
        with self._lock:
            written = max(now_ms(), self._last_written + 1)
            table = pa.Table.from_pylist([_to_row(txn, written)], schema=TRANSACTIONS_SCHEMA)
            while True:
                try:
                    write_deltalake(self._dt, table, mode="append")
                    break
                except STORAGE_ERRORS as exc:
                    if time.monotonic() >= deadline:
                        raise StorageUnavailable(
                            f"could not store transaction {txn.transactional_id!r}: {exc}") from exc
                    time.sleep(STORAGE_RETRY_PAUSE_S)
                    try:
                        self._dt.update_incremental()
                    except STORAGE_ERRORS:
                        pass
            self._last_written = written
            self._rows += 1
            if self._known_version == self._dt.version() - 1:
                self._known_version = self._dt.version()  # ours, right after what was read: nothing missed

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
    )
