"""Record validation for typed topics (`confluent.value.schema.validation`, `confluent.key.schema.validation`):
is each key or value in Confluent's wire format, under a schema id registered for the topic's subject
(TopicNameStrategy: `<topic>-value`, `<topic>-key`), and does its payload decode with that schema?

AVRO payloads are read with fastavro's schemaless reader (every byte must be used); JSON payloads must be
JSON valid under the schema (the `jsonschema` library, draft 7 unless the schema names another); PROTOBUF
payloads must start with message indexes naming a message of the schema's file, and the rest must parse as
that message (the `protobuf` runtime; unknown fields are kept, as every Protobuf reader keeps them).
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
from typing import Any, Callable, Sequence

import fastavro
import fastavro.validation
import jsonschema
import orjson
import referencing
import referencing.jsonschema

from lakelog.platform.catalog.topic_config import TopicConfig
from lakelog.platform.schema_registry import compatibility, protobuf_schema
from lakelog.platform.schema_registry.registry import SchemaRegistry
from lakelog.platform.schema_registry.state import State
from lakelog.platform.schema_registry.wire_format import NotWireFormat, split_wire

Decoder = Callable[[memoryview], Any]  # raises when the payload does not decode


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

    def check(self, topic: str, config: TopicConfig, keys: Sequence[bytes | None],
              values: Sequence[bytes | None]) -> list[RecordError]:
        """The records that fail, by index (empty: all pass). Keys and values as the topic's config asks."""
        found: dict[int, list[str]] = {}
        refreshed: set[str] = set()  # subjects re-read in this call: one re-read each, however many misses
        for is_key, enabled, column in ((True, config.confluent_key_schema_validation, keys),
                                        (False, config.confluent_value_schema_validation, values)):
            if not enabled:
                continue
            subject = subject_of(topic, is_key)
            for index, data in enumerate(column):
                problem = self.problem(subject, data, refreshed)
                if problem is not None:
                    found.setdefault(index, []).append(f"{'key' if is_key else 'value'}: {problem}")
        return [RecordError(index, "; ".join(messages)) for index, messages in sorted(found.items())]

    def problem(self, subject: str, data: bytes | None, refreshed: set[str] | None = None) -> str | None:
        """Why `data` is not a valid key or value for `subject` (None: it is). `refreshed`: the subjects whose
        ids were re-read already (not again)."""
        if data is None:
            return None
        try:
            schema_id, payload = split_wire(data)
        except NotWireFormat as exc:
            return str(exc)
        known = schema_id in self._ids(subject, refresh=False)
        if not known and (refreshed is None or subject not in refreshed):
            if refreshed is not None:
                refreshed.add(subject)
            known = schema_id in self._ids(subject, refresh=True)
        if not known:
            return f"schema id {schema_id} is not registered under subject {subject!r}"
        parsed = self.parsed(schema_id)
        try:
            parsed.decode(payload)
        except Exception as exc:  # each format's decoder raises its own errors
            return f"does not decode with schema id {schema_id} ({parsed.schema_type}): {describe_error(exc)}"
        return None

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


def _parse(state: State, schema_id: int) -> ParsedSchema:
    stored = state.schemas[schema_id]
    references = state.reference_texts(stored.references)
    if stored.schema_type == compatibility.AVRO:
        names: dict[str, Any] = {}
        for text in references.values():
            fastavro.parse_schema(json.loads(text), named_schemas=names)
        avro = fastavro.parse_schema(json.loads(stored.schema), named_schemas=names)
        return ParsedSchema(schema_id, stored.schema_type, _avro_decoder(avro), avro)
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
    def decode(payload: memoryview) -> Any:
        indexes, used = protobuf_schema.read_indexes(payload)
        return schema.message_class(indexes).FromString(bytes(payload[used:]))  # LookupError: no such message

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
