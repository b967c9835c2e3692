"""Protobuf compatibility, by Confluent's rules (its schema registry's protobuf `SchemaDiff`): the differences
between the file a reader has and the file data was written with, and which of them break reading.

Compatible: messages added or moved (message indexes are per schema id), enums and their constants added,
changed or removed, fields added or removed (optional ones; unknown fields are skipped, missing ones read as
defaults), fields renamed (the wire has numbers, not names), a oneof added or removed, a field added to a
oneof, one field moved into a new oneof, string <-> bytes, and a string, bytes or message field made
repeated or singular. Incompatible: the package changed, a message removed, a field's kind changed (scalar,
message, map), its scalar kind changed outside the groups the wire format shares (int32/int64/uint32/
uint64/bool/enum, sint32/sint64, string/bytes, fixed32/sfixed32, fixed64/sfixed64, float, double), its
message type changed (by name, or incompatibly), a numeric field made repeated or singular, a required field
added or removed, a field removed from a oneof, several fields moved into one oneof, or a field moved into a
oneof that holds existing fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from lakelog.platform.schema_registry.protobuf_schema import ProtoSchema

_F = FieldDescriptor
_SCALAR_KINDS = {
    _F.TYPE_INT32: "number", _F.TYPE_INT64: "number", _F.TYPE_UINT32: "number", _F.TYPE_UINT64: "number",
    _F.TYPE_BOOL: "number", _F.TYPE_ENUM: "number", _F.TYPE_SINT32: "signed", _F.TYPE_SINT64: "signed",
    _F.TYPE_STRING: "string or bytes", _F.TYPE_BYTES: "string or bytes", _F.TYPE_FIXED32: "fixed32",
    _F.TYPE_SFIXED32: "fixed32", _F.TYPE_FIXED64: "fixed64", _F.TYPE_SFIXED64: "fixed64", _F.TYPE_FLOAT: "float",
    _F.TYPE_DOUBLE: "double",
}
_LENGTH_DELIMITED = {_F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE}
INCOMPATIBLE = {
    "PACKAGE_CHANGED": "the package changed",
    "MESSAGE_REMOVED": "a message was removed",
    "FIELD_KIND_CHANGED": "a field's kind (scalar, message, map) changed",
    "FIELD_SCALAR_KIND_CHANGED": "a field's scalar type changed to one the wire format does not share",
    "FIELD_NAMED_TYPE_CHANGED": "a field's message type changed",
    "FIELD_NUMERIC_LABEL_CHANGED": "a numeric field was made repeated or singular",
    "REQUIRED_FIELD_ADDED": "a required field was added",
    "REQUIRED_FIELD_REMOVED": "a required field was removed",
    "ONEOF_FIELD_REMOVED": "a field was removed from a oneof",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": "several existing fields were moved into one oneof",
    "FIELD_MOVED_TO_EXISTING_ONEOF": "a field was moved into a oneof that holds existing fields",
}


@dataclass
class _Diff:
    """The differences found, as Confluent names them, each with its path (`#/Message/field number`)."""

    reader_file: str
    writer_file: str
    found: list[tuple[str, str]] = field(default_factory=list)
    compared: set[tuple[str, str]] = field(default_factory=set)  # message pairs compared already (recursion)

    def add(self, kind: str, path: str) -> None:
        if (kind, path) not in self.found:
            self.found.append((kind, path))


def read_problems(reader: ProtoSchema, writer: ProtoSchema) -> list[str]:
    """Why data written with `writer` is not readable with `reader` (empty: it is), Confluent's
    incompatible differences from `writer` (the original) to `reader` (the update)."""
    diff = _Diff(reader.file.name, writer.file.name)
    if writer.file.package != reader.file.package:
        diff.add("PACKAGE_CHANGED", "#/")
    _compare_types(diff, "#", list(writer.file.message_types_by_name.values()),
                   list(reader.file.message_types_by_name.values()))
    return [f"{kind} at '{path}': {INCOMPATIBLE[kind]}" for kind, path in diff.found if kind in INCOMPATIBLE]


def _compare_types(diff: _Diff, path: str, original: list[Descriptor], update: list[Descriptor]) -> None:
    # Enums are left out: every enum change is compatible (their values are numbers on the wire).
    old = {m.name: m for m in original if not _is_map_entry(m)}
    new = {m.name: m for m in update if not _is_map_entry(m)}
    for name in sorted(old.keys() | new.keys()):
        if name not in new:
            diff.add("MESSAGE_REMOVED", f"{path}/{name}")
        elif name in old:
            _compare_message(diff, f"{path}/{name}", old[name], new[name])


def _compare_message(diff: _Diff, path: str, original: Descriptor, update: Descriptor) -> None:
    pair = (original.full_name, update.full_name)
    if pair in diff.compared:
        return
    diff.compared.add(pair)
    old_oneof, new_oneof = _oneofs(original), _oneofs(update)
    old_all = {f.number: f for f in original.fields}
    new_all = {f.number: f for f in update.fields}
    old_top = {n: f for n, f in old_all.items() if n not in old_oneof}
    new_top = {n: f for n, f in new_all.items() if n not in new_oneof}
    for oneof in _oneof_names(new_oneof):
        members = [n for n, o in new_oneof.items() if o == oneof]
        moved = sum(1 for n in members if old_top.pop(n, None) is not None)
        existing = sum(1 for n in members if n in old_oneof)
        if moved > 1:
            diff.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF", f"{path}/{oneof}")
        elif moved == 1 and existing:
            diff.add("FIELD_MOVED_TO_EXISTING_ONEOF", f"{path}/{oneof}")
    for oneof in sorted(set(_oneof_names(old_oneof)) & set(_oneof_names(new_oneof))):
        old_members = {n for n, o in old_oneof.items() if o == oneof}
        new_members = {n for n, o in new_oneof.items() if o == oneof}
        for number in sorted(old_members | new_members):
            if number not in new_members:
                if number not in new_all:
                    diff.add("ONEOF_FIELD_REMOVED", f"{path}/{oneof}/{number}")
            elif number in old_members:
                _compare_field(diff, f"{path}/{oneof}/{number}", old_all[number], new_all[number])
    for number in sorted(old_top.keys() | new_top.keys()):
        if number not in new_top:
            if old_top[number].is_required:
                diff.add("REQUIRED_FIELD_REMOVED", f"{path}/{number}")
        elif number not in old_top:
            if new_top[number].is_required:
                diff.add("REQUIRED_FIELD_ADDED", f"{path}/{number}")
        else:
            _compare_field(diff, f"{path}/{number}", old_top[number], new_top[number])
    for number in sorted(old_all.keys() & new_all.keys()):  # fields whose oneof changed
        if old_oneof.get(number) != new_oneof.get(number):
            _compare_field(diff, f"{path}/{number}", old_all[number], new_all[number])
    _compare_types(diff, path, list(original.nested_types), list(update.nested_types))


def _compare_field(diff: _Diff, path: str, original: FieldDescriptor, update: FieldDescriptor) -> None:
    old_map, new_map = _is_map(original), _is_map(update)
    if original.is_repeated != update.is_repeated and not (old_map or new_map):
        if original.type in _LENGTH_DELIMITED and update.type in _LENGTH_DELIMITED:
            pass  # FIELD_STRING_OR_BYTES_LABEL_CHANGED: compatible
        else:
            diff.add("FIELD_NUMERIC_LABEL_CHANGED", path)
    _compare_types_of(diff, path, original, update)


def _compare_types_of(diff: _Diff, path: str, original: FieldDescriptor, update: FieldDescriptor) -> None:
    old_kind, new_kind = _kind(original), _kind(update)
    if old_kind != new_kind:
        diff.add("FIELD_KIND_CHANGED", path)
    elif old_kind == "scalar":
        if _SCALAR_KINDS[original.type] != _SCALAR_KINDS[update.type]:
            diff.add("FIELD_SCALAR_KIND_CHANGED", path)
    elif old_kind == "map":
        for name in ("key", "value"):
            _compare_types_of(diff, path, original.message_type.fields_by_name[name],
                              update.message_type.fields_by_name[name])
    else:
        old_type, new_type = original.message_type, update.message_type
        if _local_name(old_type) != _local_name(new_type):
            diff.add("FIELD_NAMED_TYPE_CHANGED", path)
        elif old_type.file.name != diff.writer_file or new_type.file.name != diff.reader_file:
            # a type from an import: not compared with the file's own messages, so compared here
            before = len([k for k, _ in diff.found if k in INCOMPATIBLE])
            _compare_message(diff, f"#/{_local_name(new_type)}", old_type, new_type)
            if len([k for k, _ in diff.found if k in INCOMPATIBLE]) > before:
                diff.add("FIELD_NAMED_TYPE_CHANGED", path)


def _kind(f: FieldDescriptor) -> str:
    if _is_map(f):
        return "map"
    return "message" if f.type in (_F.TYPE_MESSAGE, _F.TYPE_GROUP) else "scalar"


def _is_map(f: FieldDescriptor) -> bool:
    return f.type == _F.TYPE_MESSAGE and _is_map_entry(f.message_type)


def _is_map_entry(message: Descriptor) -> bool:
    return message.GetOptions().map_entry


def _local_name(message: Descriptor) -> str:
    package = message.file.package
    return message.full_name[len(package) + 1:] if package else message.full_name


def _oneofs(message: Descriptor) -> dict[int, str]:
    """Field number -> its (real) oneof's name; proto3 `optional` fields' synthetic oneofs are no oneofs."""
    proto = descriptor_pb2.DescriptorProto()
    message.CopyToProto(proto)
    synthetic = {f.number for f in proto.field if f.proto3_optional}
    return {f.number: f.containing_oneof.name for f in message.fields
            if f.containing_oneof is not None and f.number not in synthetic}


def _oneof_names(oneofs: dict[int, str]) -> Iterable[str]:
    return sorted(set(oneofs.values()))
