"""Control tables: small append-only Delta tables in which the latest row per key wins — the catalog,
ACLs, committed offsets, replica state. Opening, reading, re-reading when changed and picking the
latest row per key, in one place.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from lakelog.platform.storage import Storage

CONTROL_TABLE_PROPERTIES = {"delta.checkpointInterval": "50", "delta.logRetentionDuration": "interval 7 days"}


def control_table_exists(storage: Storage, path: str) -> bool:
    return DeltaTable.is_deltatable(storage.uri(path), storage_options=storage.delta_options())


def open_control_table(storage: Storage, path: str, schema: pa.Schema,
                       properties: dict[str, str | None] | None = None) -> DeltaTable:
    """The control table at `path`, created (with `properties` over the defaults) if it does not exist."""
    uri = storage.uri(path)
    if not control_table_exists(storage, path):
        try:
            DeltaTable.create(uri, schema=schema, mode="ignore",
                              configuration={**CONTROL_TABLE_PROPERTIES, **(properties or {})},
                              storage_options=storage.delta_options())
        except CommitFailedError:
            pass  # another process created it at the same moment: its version 0 won the put-if-absent
    return DeltaTable(uri, storage_options=storage.delta_options())


def read_control_table(storage: Storage, table: DeltaTable) -> pa.Table:
    """All rows of a small control table, read file by file on this thread.

    Not `DeltaTable.to_pyarrow_table()`: its dataset scan reads through a
    Python filesystem handler on Arrow's I/O threads, and a process exiting
    while one of those threads is still busy aborts.
    """
    schema = table.schema().to_arrow()
    pieces = []
    for uri in table.file_uris():
        with storage.open_input(uri) as source:
            pieces.append(_without_views(pq.read_table(source, pre_buffer=False, use_threads=False)))
    if not pieces:
        return pa.schema(schema).empty_table()
    return pa.concat_tables(pieces, promote_options="default")


def _without_views(rows: pa.Table) -> pa.Table:
    """Strings and binaries as plain arrays: the files delta-rs rewrites on a delete (DeleteGroups) hold
    string_view columns, which Arrow's `take` (latest_rows) and concatenation with the others refuse."""
    plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    if not any(field.type in plain for field in rows.schema):
        return rows
    return rows.cast(pa.schema([field.with_type(plain.get(field.type, field.type)) for field in rows.schema]))


def reread_if_changed(storage: Storage, table: DeltaTable, known_version: int) -> tuple[int, pa.Table | None]:
    """(version, rows) of a control table after loading new commits; rows is None when unchanged."""
    table.update_incremental()
    version = table.version()
    if version == known_version:
        return version, None
    if version == 0:
        return version, pa.schema(table.schema().to_arrow()).empty_table()
    return version, read_control_table(storage, table)


def latest_rows(rows: pa.Table, keys: Sequence[str], order: Sequence[str]) -> pa.Table:
    """The last row of each key, rows ordered by the `order` columns ascending (ties: the later row)."""
    if rows.num_rows == 0:
        return rows
    n = rows.num_rows
    ranked = rows.append_column("__row", pa.array(np.arange(n)))
    ranked = ranked.sort_by([(column, "ascending") for column in (*order, "__row")])
    ranked = ranked.append_column("__rank", pa.array(np.arange(n)))
    last = ranked.group_by(list(keys), use_threads=False).aggregate([("__rank", "max")])
    picked = ranked.take(pa.array(np.sort(last.column("__rank_max").to_numpy())))
    return picked.drop_columns(["__row", "__rank"])
