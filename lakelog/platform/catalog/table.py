"""The catalog's Delta table as one node holds it: the latest row of every topic name in memory, kept
current by this node's own commits and by reading only the commits made since (not the whole table).

- Load: the newest catalog snapshot (`_lakelog/catalog-<version>.parquet`, the latest row per name as of
  that version, written every `SNAPSHOT_INTERVAL` versions) and the commits after it; a catalog without one
  (made before snapshots) is read whole through delta-rs once.
- Follow: a GET of the next commit file (nothing new: one request that finds nothing), then its new data
  file; a commit that is not a plain append (another tool's) reloads the table through delta-rs.
- Commit: the row's data file, then the commit file of the next version, put only if that version is free.
  A version taken by another node means this node's view was behind: the caller catches up and validates
  again, so a change is never decided on a stale view, and no read precedes a commit.
Writes the files delta-rs would (readable by any Delta reader); the Delta checkpoint is written beside the
snapshot, in the background.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import uuid
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction, Transaction

from lakelog.platform.clock import now_ms
from lakelog.platform.delta.control_table import control_table_exists, open_control_table, read_control_table
from lakelog.platform.delta.delta_log import appended, commit_uri, encode_commit
from lakelog.platform.errors import CatalogMissing, StorageUnavailable
from lakelog.platform.layout import CATALOG_TABLE
from lakelog.platform.storage import STORAGE_ERRORS, Storage, describe_storage_error
from lakelog.schemas import CATALOG_SCHEMA

log = logging.getLogger(__name__)

SNAPSHOT_INTERVAL = 50  # as the control tables' delta.checkpointInterval
SNAPSHOTS_KEPT = 3
SNAPSHOT_DIR = "_lakelog"


def snapshot_name(version: int) -> str:
    return f"catalog-{version:020d}.parquet"


def snapshot_version(name: str) -> int | None:
    if name.startswith("catalog-") and name.endswith(".parquet"):
        digits = name.removeprefix("catalog-").removesuffix(".parquet")
        return int(digits) if digits.isdigit() else None
    return None


class CatalogTable:
    """Rows by name (dicts of CATALOG_SCHEMA's columns; deleted names too: their generation counts) and
    the version they are current at. Not thread-safe: the catalog calls it under its lock."""

    def __init__(self, storage: Storage, create: bool) -> None:
        self.storage = storage
        self.uri = storage.uri(CATALOG_TABLE)
        self.rows: dict[str, dict[str, Any]] = {}
        self.version = -1
        self.changed: set[str] | None = set()  # names whose row changed since the caller looked; None: any
        self._snapshots: list[threading.Thread] = []  # being written in the background
        try:
            exists = control_table_exists(storage, CATALOG_TABLE)
            if not exists and not create:
                raise CatalogMissing(f"{storage.root} holds no lakelog catalog; `lakelog topics create` or "
                                     "`lakelog serve` creates one")
            if not exists:
                open_control_table(storage, CATALOG_TABLE, CATALOG_SCHEMA)
            self.created = not exists
            if not self._load_snapshot():
                self.reload()
        except STORAGE_ERRORS as exc:
            raise StorageUnavailable(describe_storage_error(storage, exc)) from None

    # ---- reading ------------------------------------------------------------

    def reload(self) -> None:
        """The whole table through delta-rs: every data file (a catalog without a snapshot, or a commit
        another tool made)."""
        table = DeltaTable(self.uri, storage_options=self.storage.delta_options())
        self.rows, self.changed = {}, None
        self._apply(read_control_table(self.storage, table).to_pylist() if table.version() > 0 else [])
        self.version = table.version()

    def _load_snapshot(self) -> bool:
        names = self.storage.list_names(f"{self.uri}/{SNAPSHOT_DIR}")
        found = sorted(v for n in names if (v := snapshot_version(n)) is not None)
        if not found:
            return False
        try:
            rows = pq.read_table(pa.BufferReader(self.storage.read_bytes(
                f"{self.uri}/{SNAPSHOT_DIR}/{snapshot_name(found[-1])}")))
        except FileNotFoundError:
            return False  # cleaned by a node that wrote a newer one since the listing
        except pa.ArrowException as exc:
            log.warning("catalog snapshot of version %d unreadable (%s): reading the whole table", found[-1], exc)
            return False
        self.rows, self.changed = {}, None
        self._apply(rows.to_pylist())
        self.version = found[-1]
        self.catch_up()
        return True

    def catch_up(self) -> bool:
        """Read the commits made since `version`; True when there were any."""
        changed = False
        while True:
            try:
                commit = self.storage.read_bytes(commit_uri(self.uri, self.version + 1))
            except FileNotFoundError:
                return changed
            changed = True
            parsed = appended(commit)
            if parsed is None:
                self.reload()
                continue
            for add in parsed[0]:
                data = self.storage.read_bytes(f"{self.uri}/{add.path}")
                self._apply(pq.read_table(pa.BufferReader(data)).to_pylist())
            self.version += 1

    def _apply(self, rows: Iterable[dict[str, Any]]) -> None:
        """The latest row per name wins: the higher generation, and of equal ones the later row."""
        for row in rows:
            known = self.rows.get(row["name"])
            if known is None or row["generation"] >= known["generation"]:
                self.rows[row["name"]] = row
                if self.changed is not None:
                    self.changed.add(row["name"])

    def take_changed(self) -> set[str] | None:
        """The names changed since the last call (None: the table was reloaded, any may have)."""
        changed, self.changed = self.changed, set()
        return changed

    # ---- writing ------------------------------------------------------------

    def write_data(self, rows: pa.Table) -> AddAction:
        """The data file of a commit to come (any number of rows): one PUT."""
        sink = io.BytesIO()
        pq.write_table(rows.cast(CATALOG_SCHEMA), sink, compression="snappy")
        data = sink.getvalue()
        path = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        self.storage.write_bytes(f"{self.uri}/{path}", data)
        return AddAction(path, len(data), {}, now_ms(), True, json.dumps({"numRecords": rows.num_rows}))

    def commit(self, add: AddAction, rows: pa.Table, txns: list[Transaction]) -> bool:
        """Commit `add` (holding `rows`) as the next version: one put-if-absent. False when another node
        took that version (the data file is deleted; the caller catches up and decides again)."""
        version = self.version + 1
        if not self.storage.put_if_absent(commit_uri(self.uri, version), encode_commit([add], txns, {}, None)):
            try:
                self.storage.delete_files([f"{self.uri}/{add.path}"])
            except STORAGE_ERRORS:
                pass  # unreferenced: no reader sees it
            return False
        self._apply(rows.to_pylist())
        self.version = version
        if version % SNAPSHOT_INTERVAL == 0:
            snapshot = pa.Table.from_pylist(list(self.rows.values()), schema=CATALOG_SCHEMA)
            writing = threading.Thread(target=self._write_snapshot, args=(version, snapshot), daemon=True,
                                       name="lakelog-catalog-snapshot")
            writing.start()
            self._snapshots = [t for t in self._snapshots if t.is_alive()] + [writing]
        return True

    def close(self, timeout_s: float = 30.0) -> None:
        """Let a snapshot being written finish (a process exiting under delta-rs's threads may abort)."""
        for writing in self._snapshots:
            writing.join(timeout_s)

    def _write_snapshot(self, version: int, rows: pa.Table) -> None:
        """The snapshot and Delta checkpoint of `version` (any node writing the same version writes the same
        rows); older snapshots beyond the last few are deleted."""
        folder = f"{self.uri}/{SNAPSHOT_DIR}"
        try:
            sink = io.BytesIO()
            pq.write_table(rows, sink, compression="snappy")
            self.storage.write_bytes(f"{folder}/{snapshot_name(version)}", sink.getvalue())
            DeltaTable(self.uri, version=version, storage_options=self.storage.delta_options()).create_checkpoint()
            older = sorted(v for n in self.storage.list_names(folder) if (v := snapshot_version(n)) is not None)
            self.storage.delete_files([f"{folder}/{snapshot_name(v)}" for v in older[:-SNAPSHOTS_KEPT]])
        except Exception as exc:  # a background nicety: the next snapshot version tries again
            log.warning("catalog snapshot of version %d not written: %s", version, exc)
