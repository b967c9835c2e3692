"""JSON Schema: parsing and Confluent's compatibility rules, as `read_problems(reader, writer)`.

Data valid under `writer` must stay valid under `reader`: types only widen (integer to number), limits
only loosen, enums only grow, a property is required by the reader only if the writer required it (or it
has a default). Content models decide added and removed properties, as in Confluent: a property the reader
adds is fine if the writer's model was closed (`additionalProperties: false`, so old data cannot hold it)
or the property accepts anything; a property the reader removes is fine if the reader's model is open.
"""

from __future__ import annotations

import json
from typing import Any

from lakelog.platform.schema_registry.errors import InvalidSchema

TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})
# keyword -> True when a larger value loosens it (a maximum), False when a smaller one does (a minimum)
LIMITS = {"maxLength": True, "minLength": False, "maximum": True, "minimum": False, "exclusiveMaximum": True,
          "exclusiveMinimum": False, "maxItems": True, "minItems": False, "maxProperties": True,
          "minProperties": False}
COMBINERS = ("oneOf", "anyOf", "allOf")
MAX_DEPTH = 64


def parse(text: str) -> Any:
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise InvalidSchema(f"Invalid schema: not JSON: {exc}") from None
    if not isinstance(schema, (dict, bool)):
        raise InvalidSchema("Invalid schema: a JSON Schema is an object or a boolean")
    _validate(schema, "#")
    return schema


def _validate(schema: Any, path: str) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise InvalidSchema(f"Invalid schema at {path}: a (sub)schema is an object or a boolean")
    types = schema.get("type")
    for t in types if isinstance(types, list) else [types] if types is not None else []:
        if t not in TYPES:
            raise InvalidSchema(f"Invalid schema at {path}: unknown type {t!r}")
    for key in ("properties", "definitions", "$defs", "patternProperties"):
        value = schema.get(key, {})
        if not isinstance(value, dict):
            raise InvalidSchema(f"Invalid schema at {path}/{key}: must be an object")
        for name, sub in value.items():
            _validate(sub, f"{path}/{key}/{name}")
    if "required" in schema and not (isinstance(schema["required"], list)
                                     and all(isinstance(n, str) for n in schema["required"])):
        raise InvalidSchema(f"Invalid schema at {path}/required: must be an array of strings")


def canonical(text: str) -> str:
    return json.dumps(json.loads(text), separators=(",", ":"))


def read_problems(reader: Any, writer: Any) -> list[str]:
    problems: list[str] = []
    _check(reader, writer, reader, writer, "#", problems, 0)
    return problems


def _deref(schema: Any, root: Any) -> Any:
    for _ in range(MAX_DEPTH):
        if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#")):
            return schema
        target = root
        for part in schema["$ref"][1:].strip("/").split("/"):
            if not part:
                continue
            target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, dict) else None
        schema = target if target is not None else {}
    return schema


def _types(schema: dict) -> set[str] | None:
    """The types a schema admits (None: any)."""
    t = schema.get("type")
    if t is None:
        return None
    found = set(t) if isinstance(t, list) else {t}
    return found | {"integer"} if "number" in found else found


def _open(schema: dict) -> bool:
    return schema.get("additionalProperties", True) is not False


def _check(r: Any, w: Any, rroot: Any, wroot: Any, path: str, problems: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        return
    r, w = _deref(r, rroot), _deref(w, wroot)
    if r is True or r == {} or w is False:
        return  # the reader takes anything, or the writer wrote nothing
    if r is False or w is True:
        problems.append(f"{path}: the reader accepts less than the writer's schema (anything)")
        return
    if r == w and "$ref" not in json.dumps(r):
        return
    rtypes, wtypes = _types(r), _types(w)
    if rtypes is not None and (wtypes is None or not wtypes <= rtypes):
        problems.append(f"{path}: type narrowed or changed: the writer had {sorted(wtypes or ['any'])}, "
                        f"the reader takes {sorted(rtypes)}")
        return
    _check_limits(r, w, path, problems)
    if "enum" in r and ("enum" not in w or not all(v in r["enum"] for v in w["enum"])):
        problems.append(f"{path}: enum narrowed or added")
    if "const" in r and r.get("const") != w.get("const"):
        problems.append(f"{path}: const added or changed")
    if "pattern" in r and r["pattern"] != w.get("pattern"):
        problems.append(f"{path}: pattern added or changed")
    _check_combined(r, w, rroot, wroot, path, problems, depth)
    if "items" in r or "items" in w:
        ritems, witems = r.get("items", True), w.get("items", True)
        if isinstance(ritems, list) or isinstance(witems, list):
            if ritems != witems:
                problems.append(f"{path}/items: tuple items changed")
        else:
            _check(ritems, witems, rroot, wroot, f"{path}/items", problems, depth + 1)
    _check_object(r, w, rroot, wroot, path, problems, depth)


def _check_limits(r: dict, w: dict, path: str, problems: list[str]) -> None:
    for key, larger_loosens in LIMITS.items():
        if key not in r or isinstance(r[key], bool):
            continue
        if key not in w or isinstance(w[key], bool):
            problems.append(f"{path}: {key} added")
        elif (r[key] < w[key]) if larger_loosens else (r[key] > w[key]):
            problems.append(f"{path}: {key} {'decreased' if larger_loosens else 'increased'}")


def _check_combined(r: dict, w: dict, rroot: Any, wroot: Any, path: str, problems: list[str], depth: int) -> None:
    for key in COMBINERS:
        if key not in r:
            continue
        if key not in w:
            problems.append(f"{path}: {key} added")
            continue
        for i, branch in enumerate(w[key]):
            if not any(not _problems_of(rb, branch, rroot, wroot, depth) for rb in r[key]):
                problems.append(f"{path}/{key}/{i}: no branch of the reader's {key} reads this branch")
        if key == "allOf" and len(r[key]) > len(w[key]):
            problems.append(f"{path}: allOf extended")


def _problems_of(r: Any, w: Any, rroot: Any, wroot: Any, depth: int) -> list[str]:
    found: list[str] = []
    _check(r, w, rroot, wroot, "", found, depth + 1)
    return found


def _check_object(r: dict, w: dict, rroot: Any, wroot: Any, path: str, problems: list[str], depth: int) -> None:
    rprops, wprops = r.get("properties", {}), w.get("properties", {})
    for name in sorted(set(rprops) | set(wprops)):
        where = f"{path}/properties/{name}"
        if name in rprops and name in wprops:
            _check(rprops[name], wprops[name], rroot, wroot, where, problems, depth + 1)
        elif name in rprops:  # added by the reader
            if _open(w) and not _accepts_anything(rprops[name], rroot):
                extra = w.get("additionalProperties", True)
                if extra is True or _problems_of(rprops[name], extra, rroot, wroot, depth):
                    problems.append(f"{where}: property added to an open content model")
        else:  # removed by the reader
            extra = r.get("additionalProperties", True)
            if extra is False:
                problems.append(f"{where}: property removed from a closed content model")
            elif extra is not True and _problems_of(extra, wprops[name], rroot, wroot, depth):
                problems.append(f"{where}: removed property not covered by the reader's additionalProperties")
    wrequired = set(w.get("required", ()))
    for name in r.get("required", ()):
        if name not in wrequired and not (isinstance(rprops.get(name), dict) and "default" in rprops[name]):
            problems.append(f"{path}/required/{name}: required property added")
    rextra, wextra = r.get("additionalProperties", True), w.get("additionalProperties", True)
    if wextra is not False and rextra is False:
        problems.append(f"{path}: additionalProperties removed")
    elif isinstance(rextra, dict) and wextra is not False:
        _check(rextra, wextra, rroot, wroot, f"{path}/additionalProperties", problems, depth + 1)


def _accepts_anything(schema: Any, root: Any) -> bool:
    schema = _deref(schema, root)
    return schema is True or schema == {}
