"""A typed topic's struct column, `value_typed`: the record's value decoded with its registered schema, written
by the same flush that writes the record, beside the `value` bytes (zero copy: one table, one commit).

A topic is typed while its config has `confluent.value.schema.validation=true` (Confluent Server's name; the
produce path then admits only values in Confluent's wire format under the topic's subject). Each value is
decoded with the schema its id names (schemas by id never change: their decoders are cached), into the
Arrow type `schema_registry/arrow_types.py` maps it to; the column's type is the table's type merged with
the types of the flush's schemas, so a compatible evolution (new optional fields) adds nullable fields to
the table's schema (log/table_schema.py commits that). A value that does not decode, of an unknown or
unmappable schema (a recursive one), or whose schema's type conflicts with the table's, is null in the column:
the column is a view, and never costs a record. Kafka and HTTP consumers read `value`, byte for byte.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

import pyarrow as pa

from lakelog.platform.catalog.topic_config import TopicConfig
from lakelog.platform.schema_registry.arrow_types import NotMappable, TypeConflict, merged
from lakelog.platform.schema_registry.arrow_values import (
    ValueDecoder,
    common_schema_id,
    decode_bulk,
    decode_values,
    decoder_of,
)
from lakelog.platform.schema_registry.errors import RegistryError
from lakelog.platform.schema_registry.registry import SchemaRegistry
from lakelog.platform.schema_registry.state import State
from lakelog.platform.schema_registry.wire_format import schema_ids

log = logging.getLogger(__name__)

TYPED_COLUMN = "value_typed"


class TypedColumn:
    """One topic's typed column; any thread may call it (the topic's flush thread does)."""

    def __init__(self, topic: str, registry: Callable[[], SchemaRegistry], config: Callable[[], TopicConfig]) -> None:
        self.topic = topic
        self._registry = registry  # opened on first use: untyped topics never open the registry's table
        self._config = config
        self._lock = threading.Lock()
        self._decoders: dict[int, ValueDecoder | None] = {}  # None: the schema has no Arrow type

    @property
    def enabled(self) -> bool:
        return self._config().confluent_value_schema_validation

    def values(self, values: pa.Array | pa.ChunkedArray, table_type: pa.StructType | None) -> pa.StructArray | None:
        """The column for `values` (in their order), of the table's type merged with theirs; None when the
        topic is not typed, or neither the table nor these values have a type."""
        if not self.enabled:
            return None
        array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        common = common_schema_id(array)
        decoder = self._decoder(common) if common is not None else None
        if decoder is not None and decoder.bulk is not None:  # the usual flush: one schema, read in bulk
            try:
                decoded = decode_bulk(array, decoder, merged(table_type, decoder.type))
            except TypeConflict:
                decoded = None  # logged below
            if decoded is not None:
                return decoded
        rows = values.to_pylist()
        ids = schema_ids(rows)
        decoders: dict[int, ValueDecoder] = {}
        kind = table_type
        for schema_id in sorted({i for i in ids if i is not None}):
            decoder = self._decoder(schema_id)
            if decoder is None:
                continue
            try:
                kind = merged(kind, decoder.type)
            except TypeConflict as exc:
                log.error("typed column of %s: schema %d left out (its values are null in %s): %s", self.topic,
                          schema_id, TYPED_COLUMN, exc)
                continue
            decoders[schema_id] = decoder
        if kind is None:
            return None
        return decode_values(rows, decoders.get, kind, ids)

    def _decoder(self, schema_id: int) -> ValueDecoder | None:
        with self._lock:
            if schema_id in self._decoders:
                return self._decoders[schema_id]
        registry = self._registry()
        state = registry.cached_state()
        if schema_id not in state.schemas:
            state = registry.refresh()
        if schema_id not in state.schemas:
            return None  # not cached: a schema registered later is found then
        stored = state.schemas[schema_id]
        try:
            decoder: ValueDecoder | None = decoder_of(schema_id, stored.schema_type, stored.schema,
                                                      _reference_texts(state, schema_id))
        except (NotMappable, RegistryError) as exc:
            log.warning("typed column of %s: schema %d has no Arrow type, its values are null in %s: %s",
                        self.topic, schema_id, TYPED_COLUMN, exc)
            decoder = None
        with self._lock:
            self._decoders[schema_id] = decoder
        return decoder


def _reference_texts(state: State, schema_id: int) -> dict[str, str]:
    """The texts of the schemas a schema refers to, by reference name (as the registry parses them)."""
    return state.reference_texts(state.schemas[schema_id].references)
