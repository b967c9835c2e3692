"""Record validation for typed topics (`confluent.value.schema.validation`, `confluent.key.schema.validation`):
is each key or value in Confluent's wire format, under a schema id registered for the topic's subject
(TopicNameStrategy: `<topic>-value`, `<topic>-key`), and does its payload decode with that schema?

AVRO payloads are read with fastavro's schemaless reader (every byte must be used): a call's payloads of one
schema together first, by a reader compiled once per schema (avro_bulk.py), then one by one those it does not
vouch for. JSON payloads must be JSON valid under the schema (the `jsonschema` library, draft 7 unless the
schema names another); PROTOBUF payloads must start with message indexes naming a message of the schema's
file, and the rest must parse as that message (the `protobuf` runtime; unknown fields are kept, as every
Protobuf reader keeps them).
A null key or value passes: Confluent's serializers write null for null (a tombstone stays possible).

Produce stays fast: the check reads the registry's cached state (no storage I/O) and re-reads the registry
only when a schema id is not known under the subject yet (registered since, maybe on another node). Which
ids a subject holds is cached per registry state; parsed schemas per id (an id never names another schema).
"""

from __future__ import annotations

import io
import json
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, TypeAlias, cast

import fastavro
import fastavro.validation
import jsonschema
import orjson
import pyarrow as pa
import referencing
import referencing.jsonschema
from google.protobuf.message import Message

from lakelog.platform.catalog.topic_config import TopicConfig
from lakelog.platform.schema_registry import avro_bulk, compatibility, protobuf_schema
from lakelog.platform.schema_registry.arrow_values import BULK_MIN_VALUES
from lakelog.platform.schema_registry.arrow_values import common_schema_id as arrow_schema_id
from lakelog.platform.schema_registry.registry import SchemaRegistry
from lakelog.platform.schema_registry.state import State
from lakelog.platform.schema_registry.wire_format import (
    HEADER_BYTES,
    NotWireFormat,
    common_schema_id,
    schema_ids,
    split_wire,
)

Decoder = Callable[[memoryview], Any]  # raises when the payload does not decode
Column: TypeAlias = "Sequence[bytes | None] | pa.Array | pa.ChunkedArray"  # a call's keys or values
BulkCheck = Callable[[Sequence[bytes | memoryview], int], Iterable[int]]  # (values, header bytes) -> those
# (by position) it cannot vouch for


@dataclass(frozen=True)
class RecordError:
    """Why the record at `index` (of the produce call) is refused."""

    index: int
    message: str


@dataclass(frozen=True)
class ParsedSchema:
    id: int
    schema_type: str
    decode: Decoder
    avro: Any = None  # fastavro's parsed schema (AVRO)
    proto: Any = None  # protobuf_schema.ProtoSchema (PROTOBUF)
    bulk: BulkCheck | None = None  # a check of many payloads at once, where the schema allows one


def subject_of(topic: str, is_key: bool) -> str:
    """TopicNameStrategy, Confluent's default."""
    return f"{topic}-{'key' if is_key else 'value'}"


class RecordValidator:
    """Checks a typed topic's records against the registry; any thread may call it."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry
        self._lock = threading.Lock()
        self._state: State | None = None
        self._subject_ids: dict[str, frozenset[int]] = {}  # of `_state`
        self._parsed: dict[int, ParsedSchema] = {}

    def check(self, topic: str, config: TopicConfig, keys: Column, values: Column) -> list[RecordError]:
        """The records that fail, by index (empty: all pass). Keys and values as the topic's config asks: Python
        bytes, or an Arrow binary column."""
        found: dict[int, list[str]] = {}
        refreshed: set[str] = set()  # subjects re-read in this call: one re-read each, however many misses
        for is_key, enabled, column in ((True, config.confluent_key_schema_validation, keys),
                                        (False, config.confluent_value_schema_validation, values)):
            if not enabled:
                continue
            label = "key" if is_key else "value"
            for index, problem in self.problems(subject_of(topic, is_key), column, refreshed):
                found.setdefault(index, []).append(f"{label}: {problem}")
        return [RecordError(index, "; ".join(messages)) for index, messages in sorted(found.items())]

    def problems(self, subject: str, column: Column, refreshed: set[str]) -> list[tuple[int, str]]:
        """`problem` of each key or value of a call, in bulk: each schema id is looked up once, and the values
        of one id decoded together where its format allows (`ParsedSchema.bulk`); an Arrow column's straight
        from its buffers when they all have one schema id."""
        if isinstance(column, (pa.Array, pa.ChunkedArray)):
            array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
            common = arrow_schema_id(array)
            if (common is not None and len(array) >= BULK_MIN_VALUES
                    and self._unknown(subject, common, refreshed) is None and self.parsed(common).bulk is not None):
                return self._decoded(subject, common, range(len(array)), array, refreshed)
            rows: Sequence[bytes | None] = array.to_pylist()
        else:
            rows = column
        common = common_schema_id(rows)
        if common is not None:  # the usual call: one schema, every value framed; no Python per value before decoding
            return self._decoded(subject, common, range(len(rows)), cast(Sequence[bytes], rows), refreshed)
        by_id: dict[int, tuple[list[int], list[memoryview]]] = {}
        out: list[tuple[int, str]] = []
        for index, (data, schema_id) in enumerate(zip(rows, schema_ids(rows))):
            if data is None:
                continue
            if schema_id is None:  # not in the wire format: split_wire says why
                out.append((index, self.problem(subject, data) or ""))
                continue
            indexes, payloads = by_id.setdefault(schema_id, ([], []))
            indexes.append(index)
            payloads.append(memoryview(data)[HEADER_BYTES:])
        for schema_id, (indexes, payloads) in by_id.items():
            out.extend(self._decoded(subject, schema_id, indexes, payloads, refreshed, skip=0))
        out.sort()
        return out

    def _decoded(self, subject: str, schema_id: int, indexes: Sequence[int],
                 data: Sequence[bytes | memoryview] | pa.Array, refreshed: set[str], skip: int = HEADER_BYTES
                 ) -> list[tuple[int, str]]:
        """The problems of values under one schema id (`skip`: their header's bytes, still in `data`; an Arrow
        array's values have no null)."""
        unknown = self._unknown(subject, schema_id, refreshed)
        if unknown is not None:
            return [(index, unknown) for index in indexes]
        parsed = self.parsed(schema_id)
        many = len(data) >= BULK_MIN_VALUES
        doubtful = parsed.bulk(data, skip) if parsed.bulk is not None and many else range(len(data))
        out = []
        for at in doubtful:  # those the bulk check could not vouch for, or all: each decoded on its own
            value = data[at].as_py() if isinstance(data, pa.Array) else data[at]
            problem = _decode_problem(parsed, memoryview(value)[skip:])
            if problem is not None:
                out.append((indexes[at], problem))
        return out

    def problem(self, subject: str, data: bytes | None, refreshed: set[str] | None = None) -> str | None:
        """Why `data` is not a valid key or value for `subject` (None: it is). `refreshed`: the subjects whose
        ids were re-read already (not again)."""
        if data is None:
            return None
        try:
            schema_id, payload = split_wire(data)
        except NotWireFormat as exc:
            return str(exc)
        unknown = self._unknown(subject, schema_id, refreshed)
        if unknown is not None:
            return unknown
        return _decode_problem(self.parsed(schema_id), payload)

    def _unknown(self, subject: str, schema_id: int, refreshed: set[str] | None) -> str | None:
        """Why `schema_id` is not one of `subject`'s (None: it is); the registry re-read once per subject."""
        known = schema_id in self._ids(subject, refresh=False)
        if not known and (refreshed is None or subject not in refreshed):
            if refreshed is not None:
                refreshed.add(subject)
            known = schema_id in self._ids(subject, refresh=True)
        return None if known else f"schema id {schema_id} is not registered under subject {subject!r}"

    def latest(self, subject: str) -> ParsedSchema:
        """The subject's latest live schema, from a fresh read of the registry (SubjectNotFound: none)."""
        state = self.registry.refresh()
        return self.parsed(state.version(subject, "latest").id)

    def parsed(self, schema_id: int) -> ParsedSchema:
        parsed = self._parsed.get(schema_id)
        if parsed is None:
            state = self.registry.cached_state()
            if schema_id not in state.schemas:
                state = self.registry.refresh()
            parsed = self._parsed[schema_id] = _parse(state, schema_id)
        return parsed

    def _ids(self, subject: str, refresh: bool) -> frozenset[int]:
        state = self.registry.refresh() if refresh else self.registry.cached_state()
        with self._lock:
            if state is not self._state:
                self._state, self._subject_ids = state, {}
            ids = self._subject_ids.get(subject)
            if ids is None:
                ids = self._subject_ids[subject] = frozenset(v.id for v in state.versions(subject))
            return ids


def _decode_problem(parsed: ParsedSchema, payload: memoryview) -> str | None:
    try:
        parsed.decode(payload)
    except Exception as exc:  # each format's decoder raises its own errors
        return f"does not decode with schema id {parsed.id} ({parsed.schema_type}): {describe_error(exc)}"
    return None


def _parse(state: State, schema_id: int) -> ParsedSchema:
    stored = state.schemas[schema_id]
    references = state.reference_texts(stored.references)
    if stored.schema_type == compatibility.AVRO:
        names: dict[str, Any] = {}
        for text in references.values():
            fastavro.parse_schema(json.loads(text), named_schemas=names)
        avro = fastavro.parse_schema(json.loads(stored.schema), named_schemas=names)
        reader = avro_bulk.compile_reader(avro, names)
        return ParsedSchema(schema_id, stored.schema_type, _avro_decoder(avro), avro,
                            bulk=reader.doubtful if reader is not None else None)
    if stored.schema_type == compatibility.JSON:
        return ParsedSchema(schema_id, stored.schema_type, _json_decoder(json.loads(stored.schema), references))
    proto = protobuf_schema.parse(stored.schema, references)
    return ParsedSchema(schema_id, stored.schema_type, _protobuf_decoder(proto), proto=proto)


def _avro_decoder(schema: Any) -> Decoder:
    def decode(payload: memoryview) -> Any:
        source = io.BytesIO(payload)
        value = fastavro.schemaless_reader(source, schema, None)
        if source.tell() != len(payload):
            raise ValueError(f"{len(payload) - source.tell()} bytes left after the record")
        return value

    return decode


def _protobuf_decoder(schema: protobuf_schema.ProtoSchema) -> Decoder:
    classes: dict[tuple[int, ...], type[Message]] = {}  # by message indexes: looked up once each

    def decode(payload: memoryview) -> Any:
        if len(payload) and payload[0] == 0:  # the count 0: the first message, [0] (what serializers mostly write)
            indexes, used = [0], 1
        else:
            indexes, used = protobuf_schema.read_indexes(payload)
        key = tuple(indexes)
        cls = classes.get(key)
        if cls is None:
            cls = classes[key] = schema.message_class(indexes)  # LookupError: no such message
        return cls.FromString(bytes(payload[used:]))

    return decode


def _json_decoder(schema: Any, references: dict[str, str]) -> Decoder:
    validator = json_validator(schema, references)

    def decode(payload: memoryview) -> Any:
        document = orjson.loads(payload)
        error = jsonschema.exceptions.best_match(validator.iter_errors(document))
        if error is not None:
            raise ValueError(f"{error.message} (at {error.json_path})")
        return document

    return decode


def json_validator(schema: Any, references: dict[str, str]) -> Any:
    """A validator of `schema` (draft 7 unless its `$schema` says), its references resolved by name as
    Confluent's serializers name them."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    spec = referencing.jsonschema.specification_with(cls.META_SCHEMA.get("$schema", ""),
                                                     default=referencing.jsonschema.DRAFT7)
    registry = referencing.Registry().with_resources(
        (name, referencing.Resource.from_contents(json.loads(text), default_specification=spec))
        for name, text in references.items())
    return cls(schema, registry=registry)


def describe_error(exc: Exception) -> str:
    """A decoder's error, short and on one line (fastavro's validation lists its problems as a JSON array)."""
    if isinstance(exc, fastavro.validation.ValidationError):
        text = "; ".join(str(error) for error in exc.errors)
    else:
        text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "..."
