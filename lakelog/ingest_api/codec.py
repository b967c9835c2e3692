"""Record lists in and out, in bulk: JSON, NDJSON and Arrow IPC bodies to Arrow tables, fetched tables to JSON.

The hot path: orjson parses the body and one loop per record checks the shape
and collects columns of bytes (`RecordColumns`). No per-record pydantic model and
no Arrow work per request: the core builds one Arrow table per flush.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from lakelog.ingest_api.errors import MalformedRequest, SchemaViolation
from lakelog.platform.records import (
    IDEMPOTENCY_BASE,
    FetchResult,
    ProducerBatch,
    RecordColumns,
    idempotency_key_batch,
)

FORMATS = ("json", "string", "base64")
RECORD_FIELDS = frozenset({"key", "value", "headers", "partition", "timestamp"})
BODY_FIELDS = frozenset({"records", "key_format", "value_format", "producer_id", "producer_epoch", "sequence"})
MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1
ARROW_STREAM = "application/vnd.apache.arrow.stream"
NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class ParsedProduce:
    records: RecordColumns | pa.Table  # JSON bodies as columns, Arrow bodies as the table sent
    producer: dict[str, Any]  # producer_id, producer_epoch, sequence found in the body
    key_format: str = "string"  # how keys and values were given: json ones are converted on typed topics
    value_format: str = "string"


# ---- produce ------------------------------------------------------------------------


def parse_json_body(body: bytes) -> ParsedProduce:
    doc = _loads(body)
    if type(doc) is not dict:
        raise SchemaViolation("the body must be a JSON object with a 'records' list")
    unknown = doc.keys() - BODY_FIELDS
    if unknown:
        raise SchemaViolation(f"unknown field(s) {sorted(unknown)}; allowed: {sorted(BODY_FIELDS)}")
    records = doc.get("records")
    if type(records) is not list or not records:
        raise SchemaViolation("'records' must be a non-empty list of record objects")
    key_format = check_format(doc.get("key_format", "string"), "key_format")
    value_format = check_format(doc.get("value_format", "string"), "value_format")
    producer = {name: doc[name] for name in ("producer_id", "producer_epoch", "sequence") if doc.get(name) is not None}
    return ParsedProduce(record_columns(records, key_format, value_format), producer, key_format, value_format)


def parse_ndjson_body(body: bytes, key_format: str, value_format: str) -> ParsedProduce:
    records = []
    for number, line in enumerate(body.splitlines(), 1):
        if line.strip():
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise MalformedRequest(f"malformed JSON on line {number}: {exc}") from None
    if not records:
        raise SchemaViolation("no records: send one JSON record object per line")
    key_format, value_format = check_format(key_format, "key_format"), check_format(value_format, "value_format")
    return ParsedProduce(record_columns(records, key_format, value_format), {}, key_format, value_format)


def parse_arrow_body(body: bytes) -> ParsedProduce:
    """One Arrow IPC stream, and nothing after it: bytes past its end would be silently dropped."""
    source = pa.BufferReader(pa.py_buffer(body))
    try:
        table = pa.ipc.open_stream(source).read_all()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError) as exc:
        raise MalformedRequest(f"the body is not an Arrow IPC stream: {exc}") from None
    if source.tell() != len(body):
        raise MalformedRequest(f"{len(body) - source.tell()} bytes after the end of the Arrow stream (at byte "
                               f"{source.tell()} of {len(body)}); send one stream per request")
    return ParsedProduce(table, {})


def check_format(value: Any, name: str) -> str:
    if value not in FORMATS:
        raise SchemaViolation(f"{name} must be one of {', '.join(FORMATS)}, got {value!r}")
    return value


def record_columns(items: list[Any], key_format: str, value_format: str) -> RecordColumns:
    """Keys and values as bytes and, when any record has them, headers, partitions and timestamps; one loop,
    no Arrow: the core builds one table per flush."""
    keys: list[Any] = []
    values: list[Any] = []
    headers: list[Any] | None = None
    partitions: list[int | None] | None = None
    timestamps: list[int | None] | None = None
    key_of, value_of = _ENCODERS[key_format], _ENCODERS[value_format]
    for i, item in enumerate(items):
        if type(item) is not dict:
            raise SchemaViolation(f"records[{i}] must be an object")
        if not item.keys() <= RECORD_FIELDS:
            raise SchemaViolation(f"records[{i}] has unknown field(s) {sorted(item.keys() - RECORD_FIELDS)}; "
                                  f"allowed: {sorted(RECORD_FIELDS)}")
        keys.append(key_of(item.get("key"), i, "key"))
        values.append(value_of(item.get("value"), i, "value"))
        if "headers" in item:
            if headers is None:
                headers = [None] * i
            headers.append(_headers(item["headers"], i))
        elif headers is not None:
            headers.append(None)
        if "partition" in item:
            if partitions is None:
                partitions = [None] * i
            partitions.append(_int(item["partition"], i, "partition", MAX_INT32))
        elif partitions is not None:
            partitions.append(None)
        if "timestamp" in item:
            if timestamps is None:
                timestamps = [None] * i
            timestamps.append(_int(item["timestamp"], i, "timestamp", MAX_INT64))
        elif timestamps is not None:
            timestamps.append(None)
    return RecordColumns(keys, values, headers, timestamps, partitions)


def _loads(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedRequest(f"malformed JSON: {exc}") from None


def _string(value: Any, i: int, name: str) -> bytes | None:
    if type(value) is str:
        return value.encode()  # orjson refuses lone surrogates: every string it gives encodes
    if value is None:
        return None
    raise SchemaViolation(f"records[{i}].{name} must be a string (or null) under {name}_format=string; "
                          f"use {name}_format=json for embedded JSON")


def _json(value: Any, i: int, name: str) -> bytes | None:
    return None if value is None else orjson.dumps(value)


def _base64(value: Any, i: int, name: str) -> bytes | None:
    if value is None:
        return None
    if type(value) is not str:
        raise SchemaViolation(f"records[{i}].{name} must be a base64 string under {name}_format=base64")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise MalformedRequest(f"records[{i}].{name} is not valid base64") from None


_ENCODERS: dict[str, Callable[[Any, int, str], Any]] = {"string": _string, "json": _json, "base64": _base64}


def _int(value: Any, i: int, name: str, upper: int) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= upper:
        raise SchemaViolation(f"records[{i}].{name} must be an integer between 0 and {upper}, got {value!r}")
    return value


def _headers(value: Any, i: int) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if type(value) is not list:
        raise SchemaViolation(f"records[{i}].headers must be a list of {{key, value}} objects")
    out = []
    for header in value:
        if type(header) is not dict or not header.keys() <= {"key", "value"} or type(header.get("key")) is not str:
            raise SchemaViolation(f"records[{i}].headers: each header is {{\"key\": string, \"value\": string|null}}")
        raw = header.get("value")
        if raw is not None and type(raw) is not str:
            raise SchemaViolation(f"records[{i}].headers: header values are strings (or null)")
        try:
            out.append({"key": header["key"], "value": None if raw is None else raw.encode()})
            header["key"].encode()
        except UnicodeEncodeError:
            raise MalformedRequest(f"records[{i}].headers: not valid Unicode") from None
    return out


def producer_batch(fields: dict[str, Any], idempotency_key: str | None) -> ProducerBatch | None:
    """The idempotent-producer fields, or the ones an Idempotency-Key maps onto (its own producer id)."""
    if idempotency_key is not None:
        if fields:
            raise SchemaViolation("send either an Idempotency-Key header or producer_id/producer_epoch/sequence")
        if not 1 <= len(idempotency_key) <= 256:
            raise SchemaViolation("Idempotency-Key must be 1 to 256 characters")
        return idempotency_key_batch(idempotency_key)
    if not fields:
        return None
    missing = {"producer_id", "producer_epoch", "sequence"} - fields.keys()
    if missing:
        raise SchemaViolation(f"idempotent produce needs producer_id, producer_epoch and sequence; missing "
                              f"{sorted(missing)}")
    for name, upper in (("producer_id", IDEMPOTENCY_BASE - 1), ("producer_epoch", 32767), ("sequence", MAX_INT32)):
        value = fields[name]
        if type(value) is not int or not 0 <= value <= upper:
            raise SchemaViolation(f"{name} must be an integer between 0 and {upper}, got {value!r}")
    return ProducerBatch(fields["producer_id"], fields["producer_epoch"], fields["sequence"])


# ---- fetch --------------------------------------------------------------------------


def render_records(results: list[FetchResult], key_format: str, value_format: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for result in results:
        table = result.records
        if table.num_rows == 0:
            continue
        keys = _decode_column(table.column("key"), key_format)
        values = _decode_column(table.column("value"), value_format)
        offsets = table.column("offset").to_pylist()
        stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
        headers = table.column("headers").to_pylist()
        topic, partition = result.topic, result.partition
        for offset, stamp, (key, key_enc), (value, value_enc), hs in zip(offsets, stamps, keys, values, headers):
            record = {"topic": topic, "partition": partition, "offset": offset, "timestamp": stamp,
                      "key": key, "value": value, "headers": _render_headers(hs) if hs else []}
            if key_enc:
                record["key_encoding"] = key_enc
            if value_enc:
                record["value_encoding"] = value_enc
            out.append(record)
    return out


def _decode_column(column: pa.ChunkedArray, fmt: str) -> list[tuple[Any, str | None]]:
    if fmt == "base64":
        return [(None if v is None else base64.b64encode(v).decode("ascii"), None) for v in column.to_pylist()]
    if fmt == "string":
        try:
            return [(v, None) for v in column.cast(pa.string()).to_pylist()]
        except pa.ArrowInvalid:
            return [_text_or_base64(v) for v in column.to_pylist()]
    decoded: list[tuple[Any, str | None]] = []
    for raw in column.to_pylist():
        if raw is None:
            decoded.append((None, None))
            continue
        try:
            decoded.append((orjson.loads(raw), None))
        except orjson.JSONDecodeError:
            text, enc = _text_or_base64(raw)
            decoded.append((text, enc or "string"))
    return decoded


def _text_or_base64(raw: bytes | None) -> tuple[Any, str | None]:
    if raw is None:
        return None, None
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"


def _render_headers(headers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for header in headers:
        value, enc = _text_or_base64(header["value"])
        entry = {"key": header["key"], "value": value}
        if enc:
            entry["value_encoding"] = enc
        out.append(entry)
    return out


def arrow_stream(results: list[FetchResult], schema: pa.Schema) -> bytes:
    tables = [r.records for r in results if r.records.num_rows]
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
