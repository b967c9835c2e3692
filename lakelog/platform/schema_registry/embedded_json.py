"""Embedded JSON (REST Proxy's embedded formats): keys or values given as JSON, converted with the subject's
latest schema into Confluent's wire format before a typed topic checks and writes them.

AVRO: the JSON value is encoded by fastavro after fastavro's validation, as plain JSON (a union's branch is
found by the value's type, as fastavro writes Python values; Avro's own JSON encoding, with unions wrapped
as `{"type": value}`, is not read; `bytes` and `fixed` fields cannot be given). JSON Schema: the JSON text
itself, after validation. PROTOBUF: the schema's first message (message indexes [0]) read from its JSON
mapping by the `protobuf` runtime (json_format: field names or their lowerCamelCase JSON names), serialized.
"""

from __future__ import annotations

import io
from typing import Sequence

import fastavro
import fastavro.validation
import orjson
from google.protobuf import json_format

from lakelog.platform.schema_registry import compatibility
from lakelog.platform.schema_registry.protobuf_schema import write_indexes
from lakelog.platform.schema_registry.validation import ParsedSchema, RecordValidator, describe_error
from lakelog.platform.schema_registry.wire_format import framed


def to_wire_format(validator: RecordValidator, subject: str,
                   documents: Sequence[bytes | None]) -> tuple[list[bytes | None], dict[int, str]]:
    """Each JSON text (None: null, kept) framed under the subject's latest schema; the records that do not
    convert keep their JSON text and are named with why (index -> message). Reads the registry (I/O)."""
    latest = validator.latest(subject)
    converted: list[bytes | None] = []
    problems: dict[int, str] = {}
    for index, document in enumerate(documents):
        if document is None:
            converted.append(None)
            continue
        try:
            converted.append(framed(latest.id, _payload(latest, document)))
        except Exception as exc:  # fastavro's and jsonschema's errors, each its own type
            converted.append(document)
            problems[index] = (f"does not convert with {subject!r} schema id {latest.id} ({latest.schema_type}): "
                               f"{describe_error(exc)}")
    return converted, problems


def _payload(latest: ParsedSchema, document: bytes) -> bytes:
    if latest.schema_type == compatibility.JSON:
        latest.decode(memoryview(document))  # validates
        return document
    if latest.schema_type == compatibility.PROTOBUF:
        message = json_format.Parse(document, latest.proto.message_class([0])())
        return write_indexes([0]) + message.SerializeToString()
    value = orjson.loads(document)
    fastavro.validation.validate(value, latest.avro, raise_errors=True)
    sink = io.BytesIO()
    fastavro.schemaless_writer(sink, latest.avro, value)
    return sink.getvalue()
