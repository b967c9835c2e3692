"""The table's schema as typed topics evolve it: the type of the `value_typed` column (typed/column.py), and
the metadata commit that adds the column or new nullable fields of it, as Delta's schema evolution allows.

The metadata commit is lakelog's own (`lakelog.commitId`), put only if its version is free, then loaded
through delta-rs like any commit that is not an append (the checkpoint after it is delta-rs's). Every other
part of the metadata (id, partitioning, configuration, the other columns' schema text) is kept as it is.

Threads: `holds` from the appending thread with the log lock held; `typed_type` from any thread.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import TYPE_CHECKING

import orjson
import pyarrow as pa
from deltalake import DeltaTable, Schema

from lakelog.platform.clock import now_ms
from lakelog.platform.delta.delta_log import COMMIT_ID, ENGINE
from lakelog.platform.log.sequencer import Sequencer
from lakelog.platform.schema_registry.arrow_types import TypeConflict, merged
from lakelog.platform.storage import DELTA_COMMIT_RETRIES, STORAGE_ERRORS
from lakelog.platform.typed.column import TYPED_COLUMN, TypedColumn

if TYPE_CHECKING:
    from lakelog.platform.log.snapshot import LogSnapshot

log = logging.getLogger("lakelog.platform.log")  # the log's one logger, whichever part logs


class TableSchema:
    """The typed column's schema: `typed_column`, set by the topic's owner (open_topic.py) before its first
    append (None: never typed), and the column's type in the table's schema as last read, by snapshot version
    (`_typed_type_at`), read and replaced under the log lock `lock` (handed in by `TopicLog`)."""

    def __init__(self, name: str, lock: threading.RLock, snapshot: LogSnapshot, sequencer: Sequencer) -> None:
        self.name = name
        self._lock = lock
        self._snapshot = snapshot
        self._sequencer = sequencer
        self.typed_column: TypedColumn | None = None  # set by the topic's owner (open_topic.py); None: never typed
        self._typed_type_at: tuple[int, pa.StructType | None] = (-2, None)  # (snapshot version, the column's type)

    def typed_type(self) -> pa.StructType | None:
        """The `value_typed` column's type in the table's schema (None: no such column yet)."""
        with self._lock:
            table = self._snapshot.delta_table
            version = table.version()
            if self._typed_type_at[0] != version:
                schema = pa.schema(table.schema().to_arrow())
                found = schema.get_field_index(TYPED_COLUMN)
                self._typed_type_at = (version, schema.field(found).type if found >= 0 else None)
            return self._typed_type_at[1]

    def typed_values(self, records: pa.Table) -> pa.StructArray | None:
        """The flush's typed column (records in the order given), or None. Outside the lock: decoding takes
        time, and whatever fails in it costs the records nothing."""
        if self.typed_column is None:
            return None
        try:
            return self.typed_column.values(records.column("value"), self.typed_type())
        except Exception:
            log.exception("typed column of %s not decoded: this flush's records are written without it", self.name)
            return None

    def holds(self, typed: pa.StructArray | None) -> tuple[pa.StructArray | None, str | None]:
        """Before an attempt, the lock held: the table's schema made to hold the typed column's type. Answers the
        column to write (None when another writer gave the table a type it conflicts with) and the failure
        to retry after (None: done)."""
        if typed is None:
            return None, None
        for _ in range(DELTA_COMMIT_RETRIES):
            current = self.typed_type()
            try:
                wanted = merged(current, typed.type)
            except TypeConflict as exc:
                log.error("typed column of %s left out of this flush: %s", self.name, exc)
                return None, None
            if wanted == current:
                return typed, None
            version = self._snapshot.version + 1
            commit = encode_schema_change(self._snapshot.delta_table, wanted, uuid.uuid4().hex)
            try:
                landed = self._sequencer.put(version, commit)
            except STORAGE_ERRORS as exc:
                log.warning("storage error evolving the schema of %s: %s", self.name, exc)
                self._snapshot.refresh(full=True)
                return typed, f"storage unavailable: {exc}"
            self._snapshot.refresh(full=True)  # ours or another writer's: either way, read the schema it left
            if landed:
                log.info("schema of %s evolved at version %d: %s is %s", self.name, version, TYPED_COLUMN, wanted)
                self._sequencer.landed()
                self._sequencer.checkpoint_if_due(version)
        return typed, "its schema change kept conflicting with other writers' commits"


def encode_schema_change(table: DeltaTable, typed: pa.StructType, commit_id: str) -> bytes:
    """A commit holding the table's metadata with the `value_typed` column set to `typed` (added last, or its
    type replaced): the other columns' schema text kept as it was."""
    metadata = table.metadata()
    schema = orjson.loads(table.schema().to_json())
    column = orjson.loads(Schema.from_arrow(pa.schema([pa.field(TYPED_COLUMN, typed)])).to_json())["fields"][0]
    fields = [f for f in schema["fields"] if f["name"] != TYPED_COLUMN]
    at = next((i for i, f in enumerate(schema["fields"]) if f["name"] == TYPED_COLUMN), len(fields))
    schema["fields"] = [*fields[:at], column, *fields[at:]]
    now = now_ms()
    meta = {"id": metadata.id, "name": metadata.name, "description": metadata.description,
            "format": {"provider": "parquet", "options": {}}, "schemaString": orjson.dumps(schema).decode(),
            "partitionColumns": list(metadata.partition_columns), "createdTime": metadata.created_time,
            "configuration": dict(metadata.configuration)}
    info = {"timestamp": now, "operation": "ADD COLUMNS" if at == len(fields) else "CHANGE COLUMN",
            "operationParameters": {"columns": orjson.dumps([column]).decode()}, "engineInfo": ENGINE,
            COMMIT_ID: commit_id}
    return b"\n".join(orjson.dumps(line) for line in [{"commitInfo": info}, {"metaData": meta}])
