"""Checkpoints written from the writer's own state.

delta-rs writes a checkpoint from a snapshot it loads: the previous checkpoint and every commit since, a GET
each (about 27 requests at an interval of 25), with the CPU to parse them, beside the produce path. A node
that wrote or followed every commit since the last checkpoint it knows holds all of that already: the rows
of that checkpoint (kept as Arrow) and the appends since (their files and SetTransactions). The next
checkpoint is those rows with the new files added and the SetTransactions replaced, in the schema delta-rs
wrote: one PUT, and one for the `_last_checkpoint` hint. When anything else came in between (a commit
loaded through delta-rs: removes, a schema change), delta-rs writes the checkpoint, and its rows are read
back (one GET) as the next base.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction, Transaction

from lakelog.platform.clock import now_ms
from lakelog.platform.delta.delta_log import DELTA_LOG, LAST_CHECKPOINT, checkpoint_name, commit_name
from lakelog.platform.storage import Storage


@dataclass(frozen=True)
class Append:
    """One append commit: what a checkpoint needs of it."""

    version: int
    adds: list[AddAction]
    txns: list[Transaction]


class CheckpointState:
    """The rows of the latest checkpoint this node knows, and the appends since, in version order."""

    def __init__(self, keep: int) -> None:
        self._lock = threading.Lock()
        self._keep = keep  # appends remembered at most (a node that follows the log never checkpoints)
        self._base: pa.Table | None = None
        self._base_version = -1
        self._appends: list[Append] = []

    def record(self, append: Append) -> None:
        with self._lock:
            self._appends.append(append)
            del self._appends[:-self._keep]

    @property
    def has_base(self) -> bool:
        return self._base is not None

    def forget(self) -> None:
        """Commits came that this node did not see one by one: the next checkpoint is delta-rs's."""
        with self._lock:
            self._base, self._base_version, self._appends = None, -1, []

    def plan(self, version: int) -> tuple[pa.Table, list[Append]] | None:
        """The base and the appends that make the checkpoint of `version`; None unless they are every
        version since the base's."""
        with self._lock:
            if self._base is None or version <= self._base_version:
                return None
            appends = [a for a in self._appends if self._base_version < a.version <= version]
            if [a.version for a in appends] != list(range(self._base_version + 1, version + 1)):
                return None
            return self._base, appends

    def install(self, version: int, rows: pa.Table) -> None:
        """`rows` are the checkpoint of `version`: the base of the next one."""
        with self._lock:
            if version > self._base_version:
                self._base, self._base_version = rows, version
                self._appends = [a for a in self._appends if a.version > version]


def checkpoint_rows(base: pa.Table, appends: list[Append]) -> pa.Table:
    """The base checkpoint's rows, plus the appends' files, with each SetTransaction at its latest version."""
    latest: dict[str, int] = {}
    for append in appends:
        latest.update((txn.app_id, txn.version) for txn in append.txns)
    kept = base
    if latest:
        replaced = pc.is_in(pc.struct_field(base.column("txn"), "appId"), pa.array(list(latest), pa.string()))
        kept = base.filter(pc.invert(pc.fill_null(replaced, False)))
    adds = [add for append in appends for add in append.adds]
    updated = now_ms()
    return pa.concat_tables([
        kept,
        _rows(base.schema, "add", [{
            "path": a.path, "partitionValues": list(a.partition_values.items()), "size": a.size,
            "modificationTime": a.modification_time, "dataChange": a.data_change, "stats": a.stats,
        } for a in adds]),
        _rows(base.schema, "txn", [{"appId": app, "version": v, "lastUpdated": updated} for app, v in latest.items()]),
    ])


def _rows(schema: pa.Schema, action: str, values: list[dict]) -> pa.Table:
    """Rows of one action kind in the checkpoint schema (every other action column null)."""
    count = len(values)
    return pa.table([pa.array(values, field.type) if field.name == action else _absent(field, count)
                     for field in schema], schema=schema)


def _absent(field: pa.Field, count: int) -> pa.Array:
    """`count` nulls of a field that may be null, whose non-nullable children still hold (ignored) values:
    Parquet refuses a null in a field declared non-nullable, even under a null parent."""
    kind = field.type
    if pa.types.is_struct(kind):
        children = [_absent(child, count) if child.nullable else _filler(child, count) for child in kind]
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=pa.array([True] * count))
    return pa.nulls(count, kind)


def _filler(field: pa.Field, count: int) -> pa.Array:
    """Placeholder values of a non-nullable field under a null parent."""
    kind = field.type
    if pa.types.is_struct(kind):
        return pa.StructArray.from_arrays([_absent(c, count) if c.nullable else _filler(c, count) for c in kind],
                                          fields=list(kind))
    if pa.types.is_map(kind) or pa.types.is_list(kind):
        return pa.array([[]] * count, kind)
    if pa.types.is_string(kind):
        return pa.array([""] * count, kind)
    if pa.types.is_boolean(kind):
        return pa.array([False] * count, kind)
    return pa.array([0] * count, kind)


def write_checkpoint(storage: Storage, table_uri: str, version: int, rows: pa.Table) -> None:
    """The checkpoint file, then the hint readers start from (as delta-rs writes them)."""
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink, compression="snappy")
    data = sink.getvalue()
    storage.write_bytes(f"{table_uri}/{DELTA_LOG}/{checkpoint_name(version)}", data)
    adds = rows.num_rows - rows.column("add").null_count
    hint = {"version": version, "size": rows.num_rows, "sizeInBytes": data.size, "numOfAddFiles": adds}
    storage.write_bytes(f"{table_uri}/{DELTA_LOG}/{LAST_CHECKPOINT}", json.dumps(hint).encode())


def first_checkpoint(version_0: bytes) -> bytes:
    """The checkpoint of a new table whose version 0 is the commit file `version_0`, made by delta-rs from
    that file in a scratch folder (a few ms, no object request): the table's creation writes it with one
    PUT instead of delta-rs loading the new table back from the store."""
    with tempfile.TemporaryDirectory(prefix="lakelog-checkpoint-") as scratch:
        os.makedirs(f"{scratch}/{DELTA_LOG}")
        with open(f"{scratch}/{DELTA_LOG}/{commit_name(0)}", "wb") as f:
            f.write(version_0)
        DeltaTable(scratch).create_checkpoint()
        with open(f"{scratch}/{DELTA_LOG}/{checkpoint_name(0)}", "rb") as f:
            return f.read()


def read_checkpoint(storage: Storage, table_uri: str, version: int) -> pa.Table:
    return pq.read_table(pa.BufferReader(storage.read_bytes(f"{table_uri}/{DELTA_LOG}/{checkpoint_name(version)}")))
