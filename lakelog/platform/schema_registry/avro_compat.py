"""Avro schemas: parsing (fastavro) and the schema resolution rules of the Avro specification.

`read_problems(reader, writer)` lists why data written with `writer` cannot be read with `reader` (empty:
it can), as Confluent's Avro compatibility checker does: fields the reader adds need defaults, fields it
drops are ignored, int->long->float->double and string<->bytes promote, every writer enum symbol is known
to the reader (or the reader enum has a default), each writer union branch is readable, names and fixed
sizes match.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import fastavro
from fastavro.schema import SchemaParseException, UnknownType

from lakelog.platform.schema_registry.errors import InvalidSchema

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
              "string": {"bytes"}, "bytes": {"string"}}


class Parsed:
    """A parsed Avro schema and the named types it (and its references) define, by full name."""

    def __init__(self, schema: Any, names: Mapping[str, Any]) -> None:
        self.schema = schema
        self.names = names


def parse(text: str, references: Mapping[str, str] | None = None) -> Parsed:
    """Parse `text`; `references` are the texts of the schemas it refers to (named types), parsed first."""
    names: dict[str, Any] = {}
    try:
        for ref_text in (references or {}).values():
            fastavro.parse_schema(json.loads(ref_text), named_schemas=names, _write_hint=False)
        obj = json.loads(text)
        schema = fastavro.parse_schema(obj, named_schemas=names, _write_hint=False)
    except (ValueError, TypeError, KeyError, AttributeError, SchemaParseException, UnknownType) as exc:
        raise InvalidSchema(f"Invalid schema {text[:200]}: {type(exc).__name__}: {exc}") from None
    return Parsed(schema, names)


def canonical(text: str) -> str:
    """The text as served: compact JSON, key order kept."""
    return json.dumps(json.loads(text), separators=(",", ":"))


def read_problems(reader: Parsed, writer: Parsed) -> list[str]:
    problems: list[str] = []
    _check(reader.schema, writer.schema, reader, writer, "/", problems, set())
    return problems


def _resolve(schema: Any, parsed: Parsed) -> Any:
    while isinstance(schema, str) and schema not in PRIMITIVES:
        schema = parsed.names[schema]
    if isinstance(schema, dict) and isinstance(schema.get("type"), str) and schema["type"] in PRIMITIVES:
        return schema["type"]  # {"type": "int", "logicalType": ...}: read as its underlying type
    if isinstance(schema, dict) and not isinstance(schema.get("type"), str):
        return _resolve(schema["type"], parsed)
    return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return str(schema["type"])


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _names_match(reader: Any, writer: Any) -> bool:
    aliases = {_short(a) for a in reader.get("aliases", ())}
    return _short(reader["name"]) == _short(writer["name"]) or _short(writer["name"]) in aliases


def _check(r: Any, w: Any, rp: Parsed, wp: Parsed, path: str, problems: list[str], seen: set) -> None:
    r, w = _resolve(r, rp), _resolve(w, wp)
    rk, wk = _kind(r), _kind(w)
    if wk == "union":
        for i, branch in enumerate(w):
            _check(r, branch, rp, wp, f"{path}{i}/", problems, seen)
        return
    if rk == "union":
        for branch in r:
            trial: list[str] = []
            _check(branch, w, rp, wp, path, trial, set(seen))
            if not trial:
                return
        problems.append(f"{path}: the reader's union has no branch for the writer's type {_describe(w)}")
        return
    if rk != wk:
        if rk in PROMOTIONS.get(wk, ()):
            return
        problems.append(f"{path}: type mismatch: the reader expects {_describe(r)}, the writer wrote {_describe(w)}")
        return
    if rk in PRIMITIVES:
        return
    if rk in ("record", "error", "enum", "fixed") and not _names_match(r, w):
        problems.append(f"{path}: name mismatch: the reader expects {r['name']}, the writer wrote {w['name']}")
        return
    if rk == "fixed":
        if r.get("size") != w.get("size"):
            problems.append(f"{path}: fixed size mismatch: the reader expects {r.get('size')}, "
                            f"the writer wrote {w.get('size')}")
    elif rk == "enum":
        missing = [s for s in w.get("symbols", ()) if s not in set(r.get("symbols", ()))]
        if missing and "default" not in r:
            problems.append(f"{path}: the reader's enum {r['name']} lacks the writer's symbols {missing}")
    elif rk == "array":
        _check(r["items"], w["items"], rp, wp, f"{path}items/", problems, seen)
    elif rk == "map":
        _check(r["values"], w["values"], rp, wp, f"{path}values/", problems, seen)
    elif rk in ("record", "error"):
        key = (r["name"], w["name"])
        if key in seen:  # a recursive type: assumed compatible while it is being checked
            return
        seen = seen | {key}
        written = {f["name"]: f for f in w.get("fields", ())}
        for field in r.get("fields", ()):
            names = [field["name"], *field.get("aliases", ())]
            source = next((written[n] for n in names if n in written), None)
            where = f"{path}fields/{field['name']}/"
            if source is not None:
                _check(field["type"], source["type"], rp, wp, where, problems, seen)
            elif "default" not in field:
                problems.append(f"{where}: the reader's field '{field['name']}' has no default value and is "
                                "missing from the writer's schema")


def _describe(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return f"{schema['type']} {schema.get('name', '')}".strip()
