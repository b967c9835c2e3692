"""`_control/share_state` as the share-state store (`state_store.py`) writes it: appends as cheap as the
catalog's (catalog/table.py), its checkpoints and old commit files off the writer's path, its compaction
in one commit of its own (through delta-rs when it must read the table first).

- Append: the rows' Parquet file (one PUT), then the commit file of the next version, put only if that
  version is free (one put-if-absent). A version another writer took (another node appending its groups'
  rows, a group's deletion, a compaction) means this view was behind: the writer catches up to the latest
  version (one listing of `_delta_log`) and puts the same commit at the next one. Appends never conflict:
  the latest row per key wins, ordered by `written`. A put that failed ambiguously but landed is recognised
  by its data file's name in the commit found at that version.
- Checkpoints: at every version that is a multiple of `delta.checkpointInterval`, written by delta-rs from
  that version's snapshot on a background thread; the commit files before the newest checkpoint this
  process made at least `delta.logRetentionDuration` ago are then deleted (delta_log.clean_commit_log), and
  the data files a compaction removed, once REMOVED_FILE_DELETE_DELAY_S have passed.
- Compaction (the store's, every so many appends): when this writer made every commit since its last
  compaction, it holds every file and row of the table, and replaces them by their latest rows in one commit
  of its own (one PUT, one put-if-absent: `held_rows`, `replace`); otherwise (another writer committed in
  between, or no compaction yet in this process) through delta-rs's overwrite of a fresh snapshot, read
  whole (`overwrite`), after which it holds the table again. The files a compaction removed are deleted
  REMOVED_FILE_DELETE_DELAY_S later.

Files are those delta-rs writes: any Delta reader reads the table (delta-rs, DuckDB's delta extension).

Threads: `append` and `overwrite` on the store's writer thread, `snapshot` on any; checkpoints and deletions
on the background thread (`_MAINTENANCE`, one for every table of the process: one run at a time per table,
which skips to its latest due version); `close` from the caller's.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction, CommitProperties

from lakelog.platform.clock import now_ms
from lakelog.platform.delta.control_table import CONTROL_TABLE_PROPERTIES, open_control_table
from lakelog.platform.delta.delta_log import (
    ENGINE,
    add_entry,
    added_paths,
    clean_commit_log,
    commit_uri,
    encode_commit,
    latest_version,
)
from lakelog.platform.storage import DELTA_COMMIT_RETRIES, STORAGE_ERRORS, Storage

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL = "delta.checkpointInterval"
LOG_RETENTION = "delta.logRetentionDuration"
REMOVED_FILE_DELETE_DELAY_S = 60.0  # a compaction's removed files outlive any read of the snapshot before
STALE_AFTER_S = 10.0  # the known version is listed again after half this (or half the log retention, if shorter)
_MAINTENANCE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakelog-share-state-maintenance")
_UNITS_S = {"millisecond": 0.001, "second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0, "week": 604800.0}


def interval_s(value: str | None) -> float | None:
    """Seconds of a Delta interval property ("interval 10 seconds"); None when it is not one."""
    match = re.fullmatch(r"\s*interval\s+(\d+)\s+(millisecond|second|minute|hour|day|week)s?\s*", value or "")
    return int(match.group(1)) * _UNITS_S[match.group(2)] if match else None


@dataclass(frozen=True)
class _Held:
    """The table at `version` as this writer made it: its files (path, size) and their rows."""

    version: int
    files: list[tuple[str, int]]
    rows: list[pa.Table]


def replace_commit(read_version: int, removed: list[tuple[str, int]], add: AddAction, now: int) -> bytes:
    """The commit file that replaces the files of `read_version` (`removed`: path, size) by one file, as
    Delta's overwrite writes it."""
    info = {"timestamp": now, "operation": "WRITE", "engineInfo": ENGINE, "readVersion": read_version,
            "operationParameters": {"mode": "Overwrite", "partitionBy": "[]"}, "isBlindAppend": False}
    lines: list[dict] = [{"commitInfo": info}]
    lines += [{"remove": {"path": path, "deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True,
                          "partitionValues": {}, "size": size}} for path, size in removed]
    lines.append({"add": add_entry(add)})
    return b"\n".join(orjson.dumps(line) for line in lines)


def _with_properties(table: DeltaTable, properties: dict[str, str | None]) -> DeltaTable:
    """The table, its properties set to `properties` where it says otherwise (a table created before they were
    its own: a compaction's removes would stay in every checkpoint for Delta's default week). Best effort: a
    failure is logged, and the next open tries again."""
    wanted = {key: value for key, value in properties.items() if value is not None}
    current = table.metadata().configuration
    if all(current.get(key) == value for key, value in wanted.items()):
        return table
    try:
        table.alter.set_table_properties(wanted, raise_if_not_exists=False,
                                         commit_properties=CommitProperties(max_commit_retries=DELTA_COMMIT_RETRIES))
        log.info("properties of %s set to %s", table.table_uri, wanted)
    except STORAGE_ERRORS as exc:
        log.warning("properties of %s not updated: %s", table.table_uri, exc)
    table.update_incremental()
    return table


class StateTable:
    """The table and the latest version this writer knows (`version`, the writer thread's)."""

    def __init__(self, storage: Storage, path: str, schema: pa.Schema,
                 properties: dict[str, str | None] | None = None) -> None:
        self.storage = storage
        self.uri = storage.uri(path)
        self.schema = schema
        table = _with_properties(open_control_table(storage, path, schema, properties), properties or {})
        self.version = table.version()
        self._known_at = time.monotonic()  # when `version` was last known to be the latest
        config = table.metadata().configuration
        self.checkpoint_interval = int(config.get(CHECKPOINT_INTERVAL) or CONTROL_TABLE_PROPERTIES[CHECKPOINT_INTERVAL])
        self.log_kept_s = interval_s(config.get(LOG_RETENTION) or CONTROL_TABLE_PROPERTIES[LOG_RETENTION])
        # A commit file is deleted only once older than the retention, so a version after one known to be the
        # latest less than that long ago was never written and deleted: a put there is a true test of it. Past
        # half of it (clocks differ), the writer lists the log first.
        self.fresh_s = min(self.log_kept_s or STALE_AFTER_S, STALE_AFTER_S) / 2
        self.checkpoints = 0  # written by this process
        self._cond = threading.Condition()  # guards the four fields below
        self._due = -1  # the latest version due for a checkpoint
        self._checkpointed = -1  # the latest version checkpointed (or tried)
        self._running = False  # a background run is under way
        self._removed: list[tuple[float, list[str]]] = []  # (when, file uris) a compaction removed
        self._times: list[tuple[float, int]] = []  # (when, version) of this process's checkpoints: the run's
        # every file and row of the table at a version this writer committed (a new table: none)
        self._held: _Held | None = _Held(0, [], []) if self.version == 0 else None

    # ---- the writer thread --------------------------------------------------

    def snapshot(self) -> DeltaTable:
        """The table at its latest version, loaded afresh (commit files deleted since an earlier load are never
        in the way). Any thread: the known version is left alone (an append catches up when it must)."""
        return DeltaTable(self.uri, storage_options=self.storage.delta_options())

    def write_data(self, rows: pa.Table) -> AddAction:
        """The data file of a commit to come: one PUT. A few rows: no dictionaries, no statistics (a reader reads
        every file of this table whole), no Arrow schema beside Parquet's (the Delta schema is the table's)."""
        sink = pa.BufferOutputStream()
        pq.write_table(rows if rows.schema == self.schema else rows.cast(self.schema), sink, compression="snappy",
                       use_dictionary=False, write_statistics=False, store_schema=False)
        data = sink.getvalue()
        path = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        self.storage.write_bytes(f"{self.uri}/{path}", data)
        return AddAction(path, data.size, {}, now_ms(), True, json.dumps({"numRecords": rows.num_rows}))

    def append(self, add: AddAction, rows: pa.Table) -> int:
        """Commit `add` (holding `rows`) at the next free version; the version it took. Raises the storage's
        errors (the caller tries again with the same `add`: a commit of it that landed is found, not made
        twice)."""
        commit = encode_commit([add], [], {}, None)
        self._catch_up_if_stale()
        while True:
            version = self.version + 1
            if self.storage.put_if_absent(commit_uri(self.uri, version), commit) or self._holds(version, add):
                break
            self._catch_up(version)
        self._committed(version)
        held = self._held
        if held is not None and held.version == version - 1:
            self._held = _Held(version, [*held.files, (add.path, add.size)], [*held.rows, rows])
        else:
            self._held = None  # another writer committed in between: this one no longer knows every row
        return version

    def _holds(self, version: int, add: AddAction) -> bool:
        """Whether the commit at `version` is the one of `add` (an earlier put that failed but landed)."""
        try:
            return add.path in added_paths(self.storage.read_bytes(commit_uri(self.uri, version)))
        except FileNotFoundError:
            return False  # cleaned: a version long past, another writer's

    def held_rows(self) -> pa.Table | None:
        """Every row of the table when this writer made every commit since its last compaction (it holds them
        all: nothing to read); else None."""
        held = self._held
        if held is None or held.version != self.version:
            return None
        return pa.concat_tables(held.rows) if held.rows else self.schema.empty_table()

    def replace(self, rows: pa.Table) -> bool:
        """Replace every file of the table by `rows`, the latest rows of `held_rows()`, in one commit put at the
        next version; False (nothing changed) when another writer took it."""
        self._catch_up_if_stale()
        held = self._held
        if held is None or held.version != self.version:
            return False
        add = self.write_data(rows)
        version = held.version + 1
        commit = replace_commit(held.version, held.files, add, now_ms())
        if not self.storage.put_if_absent(commit_uri(self.uri, version), commit):
            self._held = None
            self._catch_up(version)
            try:
                self.storage.delete_files([f"{self.uri}/{add.path}"])
            except STORAGE_ERRORS:
                pass  # unreferenced: no reader sees it
            return False
        self._committed(version)
        self._held = _Held(version, [(add.path, add.size)], [rows])
        self._removing([f"{self.uri}/{path}" for path, _ in held.files])
        return True

    def overwrite(self, table: DeltaTable, rows: pa.Table) -> None:
        """Replace every file of `table` (a snapshot) by `rows` through delta-rs (its overwrite fails when
        another writer committed since). What it commits becomes what this writer holds."""
        read = table.version()
        removed = table.file_uris()
        write_deltalake(table, rows, mode="overwrite")
        self.version, self._known_at = max(self.version, table.version()), time.monotonic()
        self._held = None
        if table.version() == read + 1:
            files = pa.table(table.get_add_actions(flatten=True)).select(["path", "size_bytes"]).to_pylist()
            self._held = _Held(table.version(), [(f["path"], int(f["size_bytes"])) for f in files], [rows])
        self._removing(removed)

    def _catch_up_if_stale(self) -> None:
        if time.monotonic() - self._known_at >= self.fresh_s:
            self._catch_up(self.version)

    def _catch_up(self, taken: int) -> None:
        """`taken` is not free: the next try is the latest version's next (one listing of the log)."""
        known_at = time.monotonic()
        self.version, self._known_at = max(taken, latest_version(self.storage, self.uri)), known_at

    def _committed(self, version: int) -> None:
        self.version, self._known_at = version, time.monotonic()
        if version % self.checkpoint_interval == 0:
            self._request(version)

    def _removing(self, uris: list[str]) -> None:
        with self._cond:
            self._removed.append((time.monotonic(), uris))

    # ---- the background -----------------------------------------------------

    def _request(self, version: int) -> None:
        with self._cond:
            self._due = max(self._due, version)
            if self._running:
                return
            self._running = True
        _MAINTENANCE.submit(self._run)

    def _run(self) -> None:
        while True:
            with self._cond:
                version = self._due
                if version <= self._checkpointed:
                    self._running = False
                    self._cond.notify_all()
                    return
                self._checkpointed = version
            try:
                self._checkpoint(version)
                self._delete_removed()
            except Exception:  # a background nicety: the next due version tries again
                log.exception("share-state maintenance at version %d failed", version)

    def _checkpoint(self, version: int) -> None:
        try:
            DeltaTable(self.uri, version=version, storage_options=self.storage.delta_options()).create_checkpoint()
        except (*STORAGE_ERRORS, pa.ArrowException) as exc:
            log.warning("share-state checkpoint at version %d failed: %s", version, exc)
            return
        self.checkpoints += 1
        now = time.monotonic()
        self._times.append((now, version))
        if self.log_kept_s is None:
            return  # a retention this code cannot read: nothing is deleted
        kept_s = self.log_kept_s
        due = [v for at, v in self._times if now - at >= kept_s]
        self._times = [(at, v) for at, v in self._times if now - at < kept_s]
        if due:  # every commit before that checkpoint is older than the retention
            try:
                clean_commit_log(self.storage, self.uri, max(due), self.checkpoint_interval, None)
            except OSError as exc:
                log.warning("share-state log cleanup failed: %s", exc)

    def _delete_removed(self) -> None:
        now = time.monotonic()
        with self._cond:
            due = [uri for at, uris in self._removed if now - at >= REMOVED_FILE_DELETE_DELAY_S for uri in uris]
            self._removed = [(at, uris) for at, uris in self._removed if now - at < REMOVED_FILE_DELETE_DELAY_S]
        if due:
            try:
                self.storage.delete_files(due)
            except STORAGE_ERRORS as exc:
                log.warning("%d files removed by share-state compactions not deleted: %s", len(due), exc)

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Wait until no background run is due or under way; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._running, timeout_s)

    def close(self, timeout_s: float = 30.0) -> None:
        """Let a background run finish (a process exiting under delta-rs's threads may abort)."""
        self.wait(timeout_s)
