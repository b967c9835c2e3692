"""The registry's state as its control table's latest rows say, pure: schemas by id, subjects' versions,
compatibility config and mode; and the rows that record changes to it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lakelog.platform.delta.control_table import latest_rows
from lakelog.platform.schema_registry.errors import InvalidVersion, SubjectNotFound, VersionNotFound

SCHEMAS_TABLE_SCHEMA = pa.schema([
    pa.field("kind", pa.string(), nullable=False),  # schema | version | config | mode
    pa.field("subject", pa.string(), nullable=False),  # "" for schemas and the global config and mode
    pa.field("version", pa.int64(), nullable=False),  # the schema id of a `schema` row
    pa.field("id", pa.int64(), nullable=False),
    pa.field("schema_type", pa.string(), nullable=False),
    pa.field("schema", pa.string(), nullable=False),
    pa.field("references", pa.string(), nullable=False),  # JSON: [{"name", "subject", "version"}]
    pa.field("value", pa.string(), nullable=False),  # a config's level, a mode
    pa.field("state", pa.string(), nullable=False),  # live | soft (soft-deleted) | gone
    pa.field("seq", pa.int64(), nullable=False),  # the registry's revision that wrote the row
])
KEYS = ["kind", "subject", "version"]
MAX_VERSION = 2**31 - 1


@dataclass(frozen=True)
class Stored:
    id: int
    schema_type: str
    schema: str
    references: tuple[tuple[str, str, int], ...]  # (name, subject, version)

    def key(self) -> tuple[str, str, tuple]:
        return (self.schema_type, self.schema, self.references)

    def references_json(self) -> list[dict[str, Any]]:
        return [{"name": n, "subject": s, "version": v} for n, s, v in self.references]


@dataclass(frozen=True)
class Version:
    version: int
    id: int
    deleted: bool


@dataclass
class State:
    schemas: dict[int, Stored] = field(default_factory=dict)
    by_key: dict[tuple, int] = field(default_factory=dict)
    subjects: dict[str, dict[int, Version]] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)  # "" is the global level
    mode: str = "READWRITE"

    def versions(self, subject: str, deleted: bool = False) -> list[Version]:
        return sorted((v for v in self.subjects.get(subject, {}).values() if deleted or not v.deleted),
                      key=lambda v: v.version)

    def existing_versions(self, subject: str, deleted: bool = False) -> list[Version]:
        """The subject's versions; SubjectNotFound when it has none."""
        found = self.versions(subject, deleted)
        if not found:
            raise SubjectNotFound(subject)
        return found

    def version(self, subject: str, version: Any, deleted: bool = False) -> Version:
        """One version of a subject: a number or `latest` (-1)."""
        number = parse_version(version)
        found = self.existing_versions(subject, deleted)
        if number == -1:
            return found[-1]
        for v in found:
            if v.version == number:
                return v
        raise VersionNotFound(subject, version)

    def reference_texts(self, references: tuple[tuple[str, str, int], ...]) -> dict[str, str]:
        """Reference name -> schema text of every schema `references` name, directly or through the references
        of those, dependencies first (a Protobuf import's own imports must be known to parse it)."""
        texts: dict[str, str] = {}

        def visit(refs: tuple[tuple[str, str, int], ...], seen: tuple[int, ...]) -> None:
            for name, subject, version in refs:
                stored = self.schemas[self.version(subject, version, deleted=True).id]
                if name in texts or stored.id in seen:
                    continue
                visit(stored.references, (*seen, stored.id))
                texts[name] = stored.schema

        visit(references, ())
        return texts

    def next_id(self) -> int:
        return max(self.schemas, default=0) + 1

    def next_version(self, subject: str) -> int:
        return max(self.subjects.get(subject, {}), default=0) + 1


def parse_version(version: Any) -> int:
    if isinstance(version, str) and version.lower() == "latest":
        return -1
    try:
        number = int(version)
    except (TypeError, ValueError):
        raise InvalidVersion(version) from None
    if number != -1 and not 1 <= number <= MAX_VERSION:
        raise InvalidVersion(version)
    return number


def state_of(rows: pa.Table) -> State:
    state = State()
    if rows.num_rows == 0:
        return state
    for row in latest_rows(rows, KEYS, ["seq"]).to_pylist():
        kind, subject, state_name = row["kind"], row["subject"], row["state"]
        if kind == "schema":
            refs = tuple((r["name"], r["subject"], int(r["version"])) for r in json.loads(row["references"]))
            stored = Stored(row["id"], row["schema_type"], row["schema"], refs)
            state.schemas[stored.id] = stored
            state.by_key.setdefault(stored.key(), stored.id)
        elif kind == "version" and state_name != "gone":
            state.subjects.setdefault(subject, {})[row["version"]] = Version(row["version"], row["id"],
                                                                           state_name == "soft")
        elif kind == "config" and state_name == "live":
            state.configs[subject] = row["value"]
        elif kind == "mode" and state_name == "live":
            state.mode = row["value"]
    return state


def row(kind: str, seq: int, subject: str = "", version: int = 0, id: int = 0, stored: Stored | None = None,
        value: str = "", state: str = "live") -> dict[str, Any]:
    return {"kind": kind, "subject": subject, "version": version, "id": id,
            "schema_type": stored.schema_type if stored else "", "schema": stored.schema if stored else "",
            "references": json.dumps(stored.references_json() if stored else []), "value": value,
            "state": state, "seq": seq}
