"""Protobuf schemas: parsing either form the registry accepts into descriptors, and Confluent's message indexes.

A PROTOBUF schema is registered in one of two forms. confluent-kafka's ProtobufSerializer registers the file's
serialized FileDescriptorProto, base64-encoded; REST clients send `.proto` text, which is compiled by the
`protoc` that grpcio-tools bundles (run as a subprocess, so its errors come back as text and a crash costs
nothing). References (imports) are other registered schemas, by file name; the well-known types
(google/protobuf/*.proto, and google/type/*.proto from googleapis-common-protos) are always there, as
Confluent's serializers expect (they never register them). Each schema gets a pool of its own: two schemas
may use the same file name.

A record's payload starts with the message indexes (wire_format.py): which message of the file the value
is, as a path of indexes (top-level message, then nested ones), written as zigzag varints: their count
then the indexes, with the count 0 standing for [0] (the first message), as Confluent writes them.
"""

from __future__ import annotations

import base64
import binascii
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Mapping, Sequence

from google.protobuf import (
    any_pb2,
    api_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    message_factory,
    source_context_pb2,
    struct_pb2,
    timestamp_pb2,
    type_pb2,
    wrappers_pb2,
)
from google.protobuf.descriptor import Descriptor, FileDescriptor
from google.protobuf.message import Message

from lakelog.platform.schema_registry.errors import InvalidSchema

PROTOC_TIMEOUT_S = 60.0  # a compile of one schema and its imports; protoc is fast, the machine may not be
MAIN_FILE = "schema.proto"  # the name of a schema whose serialized form names no file
_WELL_KNOWN = [any_pb2, source_context_pb2, type_pb2, api_pb2, descriptor_pb2, duration_pb2, empty_pb2,
               field_mask_pb2, struct_pb2, timestamp_pb2, wrappers_pb2]


@dataclass(frozen=True)
class ProtoSchema:
    """A parsed PROTOBUF schema: its file (in a pool with its imports) and that file's descriptor proto."""

    file: FileDescriptor
    proto: descriptor_pb2.FileDescriptorProto

    def message(self, indexes: Sequence[int]) -> Descriptor:
        """The message `indexes` name (Confluent's message indexes); LookupError when there is none."""
        if not indexes:
            raise LookupError("no message index")
        messages = list(self.file.message_types_by_name.values())
        found: Descriptor | None = None
        for index in indexes:
            if not 0 <= index < len(messages):
                where = "the file" if found is None else f"message {found.full_name}"
                raise LookupError(f"message index {list(indexes)}: {where} has {len(messages)} message(s)")
            found = messages[index]
            messages = list(found.nested_types)
        return found

    def message_class(self, indexes: Sequence[int]) -> type[Message]:
        return message_factory.GetMessageClass(self.message(indexes))

    def serialized(self) -> str:
        """The base64 of the file's FileDescriptorProto (Confluent's `format=serialized`)."""
        return base64.standard_b64encode(self.proto.SerializeToString()).decode("ascii")


def parse(text: str, references: Mapping[str, str] | None = None) -> ProtoSchema:
    """Parse a schema in either form; `references`: file name -> schema text (either form) of every schema it
    imports, directly or not, dependencies first. InvalidSchema when it does not parse or an import is missing."""
    references = dict(references or {})
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    main = _protos(None, text, references)
    if is_serialized(text):  # (compiled text comes with its imports, references included)
        for name, ref_text in references.items():
            if name not in files:
                files.update(_protos(name, ref_text, references))
    files.update(main)
    main_name = next(reversed(main))  # protoc's set and a serialized file both end with the schema's file
    pool = _pool()
    _add_all(pool, files)
    return ProtoSchema(pool.FindFileByName(main_name), files[main_name])


def is_serialized(text: str) -> bool:
    """Whether `text` is the base64 form (a .proto text always holds spaces, `;` or `=` mid-text)."""
    try:
        base64.b64decode(text.strip(), validate=True)
        return True
    except (binascii.Error, ValueError):
        return False


def read_indexes(payload: memoryview | bytes) -> tuple[list[int], int]:
    """(the message indexes, how many bytes they take) at the start of a payload; ValueError if malformed."""
    position = 0

    def varint() -> int:
        nonlocal position
        value = shift = 0
        while True:
            if position >= len(payload) or shift > 63:
                raise ValueError("the payload ends inside its message indexes")
            byte = payload[position]
            position += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return (value >> 1) ^ -(value & 1)

    count = varint()
    if count < 0 or count > len(payload):
        raise ValueError(f"message index count {count} is not valid")
    if count == 0:
        return [0], position
    return [varint() for _ in range(count)], position


def write_indexes(indexes: Sequence[int]) -> bytes:
    """The message indexes as Confluent writes them ([0] as the single byte 0)."""
    if list(indexes) == [0]:
        return b"\x00"
    out = bytearray()
    for value in (len(indexes), *indexes):
        zigzag = (value << 1) ^ (value >> 63)
        while zigzag > 0x7F:
            out.append((zigzag & 0x7F) | 0x80)
            zigzag >>= 7
        out.append(zigzag)
    return bytes(out)


# ---- internals -------------------------------------------------------------------------------------------


def _protos(name: str | None, text: str, references: Mapping[str, str]
            ) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """The files of one schema text, by name, dependencies first (a serialized schema: itself only)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchema("Invalid schema: the schema must be a non-empty string")
    if is_serialized(text):
        proto = descriptor_pb2.FileDescriptorProto()
        try:
            proto.ParseFromString(base64.b64decode(text.strip()))
        except Exception as exc:  # protobuf's DecodeError, or its C runtime's own errors
            raise InvalidSchema(f"Invalid schema: not a serialized FileDescriptorProto: {exc}") from None
        proto.name = name or proto.name or MAIN_FILE
        return {proto.name: proto}
    return _compiled(name or MAIN_FILE, text, references)


def _compiled(name: str, text: str, references: Mapping[str, str]) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """`.proto` text compiled by protoc, with every reference importable by its name."""
    with tempfile.TemporaryDirectory(prefix="lakelog-proto-") as root:
        sources = os.path.join(root, "src")
        serialized = descriptor_pb2.FileDescriptorSet()
        for ref_name, ref_text in {**references, name: text}.items():
            if is_serialized(ref_text):
                serialized.file.extend(_protos(ref_name, ref_text, {}).values())
                continue
            path = os.path.join(sources, ref_name)
            if not os.path.abspath(path).startswith(os.path.abspath(sources) + os.sep):
                raise InvalidSchema(f"Invalid schema: reference name {ref_name!r} is not a relative file name")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as out:
                out.write(ref_text)
        given = os.path.join(root, "given.pb")
        with open(given, "wb") as out:
            out.write(serialized.SerializeToString())
        output = os.path.join(root, "out.pb")
        args = [sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={sources}", *_include_paths(),
                f"--descriptor_set_in={given}", f"--descriptor_set_out={output}", "--include_imports", name]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=PROTOC_TIMEOUT_S, cwd=root)
        except subprocess.TimeoutExpired:
            raise InvalidSchema(f"Invalid schema: protoc did not compile it in {PROTOC_TIMEOUT_S:.0f} s") from None
        if done.returncode != 0:
            problems = " ".join((done.stderr or done.stdout).replace(sources + os.sep, "").split())
            raise InvalidSchema(f"Invalid schema: protoc: {problems[:500] or f'exit code {done.returncode}'}")
        result = descriptor_pb2.FileDescriptorSet()
        with open(output, "rb") as source:
            result.ParseFromString(source.read())
    return {proto.name: proto for proto in result.file}


def _include_paths() -> list[str]:
    """protoc's own well-known types, and google/type/*.proto (googleapis-common-protos ships its sources)."""
    import google.type
    import grpc_tools

    paths = [os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")]
    paths += [os.path.dirname(os.path.dirname(p)) for p in google.type.__path__]
    return [f"--proto_path={p}" for p in paths]


def _pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for module in _WELL_KNOWN:
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    for module in _google_type_modules():
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    return pool


def _google_type_modules() -> list:
    from google.type import (
        calendar_period_pb2,
        color_pb2,
        date_pb2,
        datetime_pb2,
        dayofweek_pb2,
        decimal_pb2,
        expr_pb2,
        fraction_pb2,
        interval_pb2,
        latlng_pb2,
        localized_text_pb2,
        money_pb2,
        month_pb2,
        phone_number_pb2,
        postal_address_pb2,
        quaternion_pb2,
        timeofday_pb2,
    )
    return [calendar_period_pb2, color_pb2, date_pb2, datetime_pb2, dayofweek_pb2, decimal_pb2, expr_pb2,
            fraction_pb2, interval_pb2, latlng_pb2, localized_text_pb2, money_pb2, month_pb2, phone_number_pb2,
            postal_address_pb2, quaternion_pb2, timeofday_pb2]


def _add_all(pool: descriptor_pool.DescriptorPool, files: Mapping[str, descriptor_pb2.FileDescriptorProto]) -> None:
    """Add each file after its dependencies; the pool's own (well-known) files are not added again."""
    added: set[str] = set()

    def add(name: str, chain: tuple[str, ...]) -> None:
        if name in added:
            return
        try:
            pool.FindFileByName(name)
            added.add(name)
            return
        except KeyError:
            pass
        if name not in files:
            raise InvalidSchema(f"Invalid schema: import {name!r} is neither a reference of the schema nor a "
                                "well-known type")
        if name in chain:
            raise InvalidSchema(f"Invalid schema: import cycle {' -> '.join((*chain, name))}")
        for dependency in files[name].dependency:
            add(dependency, (*chain, name))
        try:
            pool.AddSerializedFile(files[name].SerializeToString())
        except Exception as exc:  # the pool's errors (TypeError, ValueError, its C runtime's) name the problem
            raise InvalidSchema(f"Invalid schema: {name}: {exc}") from None
        added.add(name)

    for name in files:
        add(name, ())
