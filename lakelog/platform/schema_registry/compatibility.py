"""Schema formats and compatibility levels, pure: which stored versions a new schema is checked against,
in which direction, and by which format's rules.

BACKWARD: the new schema reads data written with the latest version; FORWARD: the latest version reads
data written with the new one; FULL: both. The _TRANSITIVE levels check every version, not only the latest.
PROTOBUF schemas (serialized FileDescriptorProto in base64, or .proto text) are parsed into descriptors
(protobuf_schema.py) and checked by Confluent's Protobuf rules (protobuf_compat.py).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from lakelog.platform.schema_registry import avro_compat, json_compat, protobuf_compat, protobuf_schema
from lakelog.platform.schema_registry.errors import InvalidCompatibilityLevel, InvalidSchema

AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
SCHEMA_TYPES = (JSON, PROTOBUF, AVRO)  # the order Confluent's /schemas/types answers
LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE")
DEFAULT_LEVEL = "BACKWARD"


def validate_level(level: Any) -> str:
    if not isinstance(level, str) or level.upper() not in LEVELS:
        raise InvalidCompatibilityLevel(f"Invalid compatibility level. Valid values are {', '.join(LEVELS)}")
    return level.upper()


def validate_type(schema_type: Any) -> str:
    schema_type = AVRO if schema_type in (None, "") else schema_type
    if not isinstance(schema_type, str) or schema_type.upper() not in SCHEMA_TYPES:
        raise InvalidSchema(f"Invalid schema type {schema_type!r}; valid types are {', '.join(SCHEMA_TYPES)}")
    return schema_type.upper()


def parse(schema_type: str, text: Any, references: Mapping[str, str] | None = None) -> Any:
    """The parsed schema (InvalidSchema if it is not one); `references`: name -> referenced schema text."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchema("Invalid schema: the schema must be a non-empty string")
    if schema_type == AVRO:
        return avro_compat.parse(text, references)
    if schema_type == JSON:
        return json_compat.parse(text)
    return protobuf_schema.parse(text, references)


def canonical(schema_type: str, text: str) -> str:
    """The text stored and served: compact JSON (key order kept) for AVRO and JSON, PROTOBUF as given."""
    if schema_type == AVRO:
        return avro_compat.canonical(text)
    if schema_type == JSON:
        return json_compat.canonical(text)
    return text.strip()


def read_problems(schema_type: str, reader: Any, writer: Any) -> list[str]:
    """Why data written with `writer` is not readable with `reader` (empty: it is)."""
    if schema_type == AVRO:
        return avro_compat.read_problems(reader, writer)
    if schema_type == JSON:
        return json_compat.read_problems(reader, writer)
    return protobuf_compat.read_problems(reader, writer)


def check(level: str, schema_type: str, new: Any, existing: Sequence[tuple[str, Any]],
          describe: Callable[[int], str] = lambda i: f"version {i + 1}") -> list[str]:
    """Why `new` breaks `level` against `existing` (oldest first, (type, parsed) each); empty: compatible.
    A version of another type than `new` is incompatible with it."""
    level = validate_level(level)
    if level == "NONE" or not existing:
        return []
    indexes = range(len(existing)) if level.endswith("_TRANSITIVE") else [len(existing) - 1]
    backward = level.startswith(("BACKWARD", "FULL"))
    forward = level.startswith(("FORWARD", "FULL"))
    messages: list[str] = []
    for i in reversed(list(indexes)):
        old_type, old = existing[i]
        if old_type != schema_type:
            messages.append(f"Incompatible schema type: {schema_type} against {old_type} ({describe(i)})")
            continue
        if backward:
            messages += [f"{p} (the new schema cannot read data of {describe(i)}; {level})"
                         for p in read_problems(schema_type, new, old)]
        if forward:
            messages += [f"{p} ({describe(i)} cannot read data of the new schema; {level})"
                         for p in read_problems(schema_type, old, new)]
    return messages
