"""Compaction of `_control/transactions`: the table grows by a row per change of a transactional id and is
read whole when it changed, so once its rows exceed a bound it is rewritten to the latest row per id.

The latest row is all that recovery reads (a prepared transaction's decision is its id's latest row), and
it keeps its `written`, so the order of rows, and the store's next `written`, are unchanged.

The rewrite is one Delta commit made by put-if-absent after the version read: it removes exactly the
files read and adds one file with their latest rows. A row appended meanwhile by any node is either in a
file read (compacted with the rest) or in a file of its own that the rewrite leaves in place: when the
version after the one read is taken, the rewrite moves past commits that only append (so that a busy
table is compacted too) and gives up at any other (another rewrite): Delta's optimistic concurrency,
without relying on delta-rs's conflict checker. An append that conflicts with the rewrite (delta-rs
refuses an append after a concurrent remove) is retried by the store on the new snapshot.
The removed files are deleted at a later compaction, once no reader of an older snapshot can still be
reading them.
"""

from __future__ import annotations

import io
import json
import logging
import time
import uuid
from typing import Callable

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from lakelog.platform.clock import now_ms
from lakelog.platform.delta.control_table import latest_rows, read_control_table
from lakelog.platform.delta.delta_log import ENGINE, add_entry, appended, commit_uri
from lakelog.platform.storage import STORAGE_ERRORS, Storage

log = logging.getLogger(__name__)
MIN_ROWS = 1_000  # below this the table is left as it is (a read of it stays small)
ROWS_PER_ID = 4  # ... and above it, once it holds more than this many rows per transactional id
REMOVED_FILE_DELETE_DELAY_S = 300.0  # removed files outlive any read of the snapshot before
MAX_APPENDS_PASSED = 1_000  # appends a rewrite moves past before it gives up (reads again next time)


def compaction_due(rows: int, ids: int, min_rows: int = MIN_ROWS) -> bool:
    """Whether a table of `rows` rows over `ids` transactional ids is to be compacted."""
    return rows > max(min_rows, ROWS_PER_ID * ids)


def compacted(rows: pa.Table) -> pa.Table:
    """The latest row of each transactional id (by `written`; ties: the later row), in `written` order."""
    latest = latest_rows(rows, ["transactional_id"], ["written"])
    return latest.sort_by([("written", "ascending")])


def compaction_commit(version_read: int, removed: list[tuple[str, int]], add: AddAction, now: int) -> bytes:
    """The commit file that replaces the files read (`removed`: path, size) by the compacted one."""
    info = {"timestamp": now, "operation": "WRITE", "engineInfo": ENGINE, "readVersion": version_read,
            "operationParameters": {"mode": "Overwrite", "partitionBy": "[]"}, "isBlindAppend": False,
            "lakelog.compaction": True}
    lines: list[dict] = [{"commitInfo": info}]
    lines += [{"remove": {"path": path, "deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True,
                          "partitionValues": {}, "size": size}} for path, size in removed]
    lines.append({"add": add_entry(add)})
    return b"\n".join(orjson.dumps(line) for line in lines)


class Compactor:
    """Compacts one control table of latest-row-per-id (see the module's doc)."""

    def __init__(self, storage: Storage, uri: str, schema: pa.Schema,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._storage = storage
        self._uri = uri
        self._schema = schema
        self._clock = clock
        self._removed: list[tuple[float, list[str]]] = []  # (when, file uris) removed by this compactor

    def compact(self, version: int) -> int | None:
        """Rewrite the table as of `version` to its latest rows; the version committed, or None when a
        commit other than an append came in between (nothing changed)."""
        self._delete_removed()
        snapshot = DeltaTable(self._uri, version=version, storage_options=self._storage.delta_options())
        files = pa.table(snapshot.get_add_actions(flatten=True)).select(["path", "size_bytes"]).to_pylist()
        rows = read_control_table(self._storage, snapshot)
        latest = compacted(rows)
        add = self._write(latest)
        now = now_ms()
        removed = [(f["path"], int(f["size_bytes"])) for f in files]
        commit = compaction_commit(version, removed, add, now)
        target = version + 1
        while not self._storage.put_if_absent(commit_uri(self._uri, target), commit):
            if target - version > MAX_APPENDS_PASSED or appended(self._storage.read_bytes(
                    commit_uri(self._uri, target))) is None:
                try:
                    self._storage.delete_files([f"{self._uri}/{add.path}"])
                except STORAGE_ERRORS:
                    pass  # unreferenced: no reader sees it
                return None
            target += 1  # only appended rows: they stay beside the compacted file
        self._removed.append((self._clock(), [f"{self._uri}/{path}" for path, _ in removed]))
        log.info("%s compacted at version %d: %d rows read at version %d to %d", self._uri, target,
                 rows.num_rows, version, latest.num_rows)
        return target

    def _write(self, rows: pa.Table) -> AddAction:
        sink = io.BytesIO()
        pq.write_table(rows.cast(self._schema), sink, compression="snappy")
        data = sink.getvalue()
        path = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        self._storage.write_bytes(f"{self._uri}/{path}", data)
        return AddAction(path, len(data), {}, now_ms(), True, json.dumps({"numRecords": rows.num_rows}))

    def _delete_removed(self) -> None:
        due = [uris for at, uris in self._removed if self._clock() - at >= REMOVED_FILE_DELETE_DELAY_S]
        self._removed = [(at, uris) for at, uris in self._removed
                         if self._clock() - at < REMOVED_FILE_DELETE_DELAY_S]
        for uris in due:
            try:
                self._storage.delete_files(uris)
            except STORAGE_ERRORS as exc:
                log.warning("files removed by a compaction of %s not deleted: %s", self._uri, exc)
