"""The schema registry of a root: Confluent's model (schemas with global ids, subjects' versions,
compatibility levels, a mode) kept in the control table `<root>/_control/schemas`.

Every change commits with `SetTransaction("lakelog.schema_registry", revision)` and no retries, after
re-reading and re-validating the latest state: two nodes changing the registry at once conflict in
delta-rs and the loser tries again (with `backoff_s`), so ids stay dense and one id never names two
schemas. Reads answer from memory, re-reading the table when it has new commits.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

import pyarrow as pa
from deltalake import write_deltalake
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import CommitProperties, Transaction

from lakelog.platform.backoff import backoff_s
from lakelog.platform.delta.control_table import open_control_table, reread_if_changed
from lakelog.platform.layout import SCHEMAS_TABLE
from lakelog.platform.schema_registry import compatibility
from lakelog.platform.schema_registry.errors import (
    ConcurrentChange,
    IncompatibleSchema,
    InvalidMode,
    InvalidSchema,
    OperationNotPermitted,
    ReferenceExists,
    SchemaNotFound,
    SubjectConfigNotFound,
    SubjectNotSoftDeleted,
    SubjectSoftDeleted,
    VersionNotSoftDeleted,
    VersionSoftDeleted,
)
from lakelog.platform.schema_registry.protobuf_schema import is_serialized
from lakelog.platform.schema_registry.state import SCHEMAS_TABLE_SCHEMA, State, Stored, Version, row, state_of
from lakelog.platform.storage import Storage

APP_ID = "lakelog.schema_registry"
CHANGE_ATTEMPTS = 60
MODES = ("READWRITE", "READONLY")


class SchemaRegistry:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._dt = open_control_table(storage, SCHEMAS_TABLE, SCHEMAS_TABLE_SCHEMA)
        self._lock = threading.RLock()
        self._state = State()
        self._version = -1
        self._parsed: dict[int, Any] = {}  # schema id -> parsed schema
        self.refresh()

    def refresh(self) -> State:
        with self._lock:
            self._version, rows = reread_if_changed(self.storage, self._dt, self._version)
            if rows is not None:
                self._state = state_of(rows)
            return self._state

    def cached_state(self) -> State:
        """The state as last read, without storage I/O (the produce path's view; `refresh` catches up)."""
        return self._state

    # ---- schemas ------------------------------------------------------------

    def register(self, subject: str, schema: Any, schema_type: Any = None, references: Any = None) -> int:
        """The id of `schema` under `subject`: the existing one when the subject has it, else a new version
        (of a new id, or of the id the same schema has under another subject) if compatible."""
        def change(state: State, seq: int) -> tuple[list[dict], int]:
            if state.mode == "READONLY":
                raise OperationNotPermitted(f"Subject {subject} is in read-only mode")
            stored, parsed = self._candidate(state, schema, schema_type, references)
            for v in state.versions(subject):
                if state.schemas[v.id].key() == stored.key():
                    return [], v.id
            messages = self._problems(state, subject, stored.schema_type, parsed, state.versions(subject))
            if messages:
                raise IncompatibleSchema(f"Schema being registered is incompatible with an earlier schema for "
                                         f"subject \"{subject}\", details: {json.dumps(messages)}")
            rows = []
            sid = state.by_key.get(stored.key())
            if sid is None:
                sid = state.next_id()
                rows.append(row("schema", seq, version=sid, id=sid, stored=stored))
                self._parsed[sid] = parsed
            rows.append(row("version", seq, subject, state.next_version(subject), sid))
            return rows, sid

        return self._change(change)

    def lookup(self, subject: str, schema: Any, schema_type: Any = None, references: Any = None,
               deleted: bool = False) -> dict[str, Any]:
        """The version of `subject` holding this schema (SchemaNotFound when none does)."""
        state = self.refresh()
        versions = state.existing_versions(subject, deleted)
        stored, _ = self._candidate(state, schema, schema_type, references)
        for v in reversed(versions):
            if state.schemas[v.id].key() == stored.key():
                return self.describe(subject, v)
        raise SchemaNotFound("Schema not found")

    def schema(self, schema_id: int) -> Stored:
        stored = self.refresh().schemas.get(schema_id)
        if stored is None:
            raise SchemaNotFound(f"Schema {schema_id} not found")
        return stored

    def schema_text(self, schema_id: int, fmt: str | None = None) -> str:
        """The schema's text; `fmt="serialized"` (Confluent's): a PROTOBUF schema registered as .proto text as the
        base64 of its FileDescriptorProto, which confluent-kafka's Protobuf deserializer asks for."""
        state = self.refresh()
        stored = self.schema(schema_id)
        if fmt == "serialized" and stored.schema_type == compatibility.PROTOBUF and not is_serialized(stored.schema):
            return self._parsed_of(state, schema_id).serialized()
        return stored.schema

    def uses_of(self, schema_id: int, deleted: bool = False) -> list[tuple[str, int]]:
        """(subject, version) of every version holding the schema."""
        state = self.refresh()
        self.schema(schema_id)
        return [(s, v.version) for s in sorted(state.subjects) for v in state.versions(s, deleted)
                if v.id == schema_id]

    # ---- subjects -----------------------------------------------------------

    def subjects(self, deleted: bool = False, prefix: str = "") -> list[str]:
        state = self.refresh()
        return [s for s in sorted(state.subjects) if s.startswith(prefix) and state.versions(s, deleted)]

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        return [v.version for v in self.refresh().existing_versions(subject, deleted)]

    def version(self, subject: str, version: Any, deleted: bool = False) -> dict[str, Any]:
        return self.describe(subject, self.refresh().version(subject, version, deleted))

    def describe(self, subject: str, version: Version) -> dict[str, Any]:
        stored = self._state.schemas[version.id]
        return {"subject": subject, "version": version.version, "id": version.id, **schema_fields(stored)}

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """Soft-delete every version; `permanent`: remove versions soft-deleted already (all must be)."""
        def change(state: State, seq: int) -> tuple[list[dict], list[int]]:
            found = state.existing_versions(subject, deleted=True)
            live = [v for v in found if not v.deleted]
            if permanent and live:
                raise SubjectNotSoftDeleted(f"Subject '{subject}' was not deleted first before being "
                                            "permanently deleted")
            if not permanent and not live:
                raise SubjectSoftDeleted(f"Subject '{subject}' was soft deleted.Set permanent=true to delete "
                                         "permanently")
            chosen = found if permanent else live
            for v in chosen:
                _refuse_referenced(state, subject, v.version)
            return ([row("version", seq, subject, v.version, v.id, state="gone" if permanent else "soft")
                     for v in chosen], [v.version for v in chosen])

        return self._change(change)

    def delete_version(self, subject: str, version: Any, permanent: bool = False) -> int:
        def change(state: State, seq: int) -> tuple[list[dict], int]:
            v = state.version(subject, version, deleted=permanent)
            if permanent and not v.deleted:
                raise VersionNotSoftDeleted(f"Subject '{subject}' Version {v.version} was not deleted first "
                                            "before being permanently deleted")
            if not permanent and v.deleted:
                raise VersionSoftDeleted(f"Subject '{subject}' Version {v.version} was soft deleted.Set "
                                         "permanent=true to delete permanently")
            _refuse_referenced(state, subject, v.version)
            return [row("version", seq, subject, v.version, v.id, state="gone" if permanent else "soft")], v.version

        return self._change(change)

    # ---- compatibility, config, mode ----------------------------------------

    def compatibility(self, subject: str, schema: Any, schema_type: Any = None, references: Any = None,
                      version: Any = None) -> list[str]:
        """Why `schema` is incompatible with the subject under its level: against `version` only when given,
        else against the versions the level names (a subject without versions: compatible)."""
        state = self.refresh()
        stored, parsed = self._candidate(state, schema, schema_type, references)
        if version is None:
            existing = state.versions(subject)
        else:
            existing = [state.version(subject, version)]
        return self._problems(state, subject, stored.schema_type, parsed, existing)

    def level(self, subject: str | None = None, default_to_global: bool = True) -> str:
        configs = self.refresh().configs
        if subject is not None and subject in configs:
            return configs[subject]
        if subject is not None and not default_to_global:
            raise SubjectConfigNotFound(f"Subject '{subject}' does not have subject-level compatibility "
                                        "configured")
        return configs.get("", compatibility.DEFAULT_LEVEL)

    def set_level(self, level: Any, subject: str | None = None) -> str:
        level = compatibility.validate_level(level)
        return self._change(lambda state, seq: ([row("config", seq, subject or "", value=level)], level))

    def delete_level(self, subject: str) -> str:
        def change(state: State, seq: int) -> tuple[list[dict], str]:
            if subject not in state.configs:
                raise SubjectConfigNotFound(f"Subject '{subject}' does not have subject-level compatibility "
                                            "configured")
            return [row("config", seq, subject, state="gone")], state.configs[subject]

        return self._change(change)

    def mode(self) -> str:
        return self.refresh().mode

    def set_mode(self, mode: Any) -> str:
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise InvalidMode(f"Invalid mode. Valid values are {', '.join(MODES)}")
        return self._change(lambda state, seq: ([row("mode", seq, value=mode.upper())], mode.upper()))

    # ---- internals ----------------------------------------------------------

    def _candidate(self, state: State, schema: Any, schema_type: Any, references: Any) -> tuple[Stored, Any]:
        schema_type = compatibility.validate_type(schema_type)
        refs = _references(references)
        texts = {}
        for name, ref_subject, ref_version in refs:
            try:
                texts[name] = state.schemas[state.version(ref_subject, ref_version).id].schema
            except LookupError:
                raise InvalidSchema(f"Invalid schema: reference {name!r} names {ref_subject!r} version "
                                    f"{ref_version}, which is not registered") from None
            except Exception as exc:  # the referenced subject or version is unknown
                raise InvalidSchema(f"Invalid schema: reference {name!r}: {exc}") from None
        texts = {**state.reference_texts(refs), **texts}  # the references' own references too, first
        parsed = compatibility.parse(schema_type, schema, texts)
        return Stored(0, schema_type, compatibility.canonical(schema_type, schema), refs), parsed

    def _parsed_of(self, state: State, schema_id: int) -> Any:
        parsed = self._parsed.get(schema_id)
        if parsed is None:
            stored = state.schemas[schema_id]
            texts = state.reference_texts(stored.references)
            parsed = self._parsed[schema_id] = compatibility.parse(stored.schema_type, stored.schema, texts)
        return parsed

    def _problems(self, state: State, subject: str, schema_type: str, parsed: Any,
                  versions: list[Version]) -> list[str]:
        configs = state.configs
        level = configs.get(subject, configs.get("", compatibility.DEFAULT_LEVEL))
        existing = [(state.schemas[v.id].schema_type, self._parsed_of(state, v.id)) for v in versions]
        return compatibility.check(level, schema_type, parsed, existing,
                                   lambda i: f"version {versions[i].version}")

    def _change(self, change: Callable[[State, int], tuple[list[dict], Any]]) -> Any:
        for attempt in range(CHANGE_ATTEMPTS):
            if attempt:
                time.sleep(backoff_s(attempt - 1))
            with self._lock:
                state = self.refresh()
                revision = self._dt.transaction_version(APP_ID) or 0
                rows, result = change(state, revision + 1)
                if not rows:
                    return result
                try:
                    write_deltalake(self._dt, pa.Table.from_pylist(rows, schema=SCHEMAS_TABLE_SCHEMA), mode="append",
                                    commit_properties=CommitProperties(
                                        app_transactions=[Transaction(APP_ID, revision + 1)], max_commit_retries=0))
                except CommitFailedError:
                    continue  # another node changed the registry: re-read, re-validate
                self.refresh()
                return result
        raise ConcurrentChange("the schema registry is being changed concurrently; try again")


def schema_fields(stored: Stored) -> dict[str, Any]:
    """How Confluent serves a schema: `schemaType` only when not AVRO, `references` only when any."""
    fields: dict[str, Any] = {"schema": stored.schema}
    if stored.schema_type != compatibility.AVRO:
        fields["schemaType"] = stored.schema_type
    if stored.references:
        fields["references"] = stored.references_json()
    return fields


def _references(references: Any) -> tuple[tuple[str, str, int], ...]:
    if references is None:
        return ()
    if not isinstance(references, list):
        raise InvalidSchema("Invalid schema: references must be a list")
    out = []
    for ref in references:
        if not (isinstance(ref, dict) and isinstance(ref.get("name"), str) and isinstance(ref.get("subject"), str)
                and isinstance(ref.get("version"), int) and not isinstance(ref.get("version"), bool)):
            raise InvalidSchema("Invalid schema: a reference is {\"name\", \"subject\", \"version\"}")
        out.append((ref["name"], ref["subject"], ref["version"]))
    return tuple(out)


def _refuse_referenced(state: State, subject: str, version: int) -> None:
    for other, versions in state.subjects.items():
        for v in versions.values():
            if (subject, version) in {(s, n) for _, s, n in state.schemas[v.id].references}:
                raise ReferenceExists(f"One or more references exist to the schema {{subject={subject}, "
                                      f"version={version}}} (from {other} version {v.version})")
