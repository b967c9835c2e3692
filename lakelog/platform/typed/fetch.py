"""A typed topic's fetched records by field: each value decoded with the schema its id names, by the topic's
`TypedColumn` (typed/column.py: the decoders the flush writes the `value_typed` column with, cached per
schema id), in the table's `value_typed` type merged with the fetched schemas' types, so every record has the
same fields (null where its schema lacks one) in the order a Delta reader sees them.

The values are decoded from the fetched `value` bytes, not read from the table's column: fetches read the
tail cache, which holds no typed column (commit.py), and the decode is the same one. A value the column holds
null (not in the wire format, of an unknown or unmappable schema, not decodable) is None here too.

`json_rows` renders the column as JSON-safe Python values (the HTTP tier's answer): structs are objects,
maps objects (Avro's keys are strings), bytes base64 (standard alphabet, padded), timestamps ISO 8601 in UTC
with microseconds and `Z`, dates ISO 8601, decimals strings (exact); numbers and strings as they are.
"""

from __future__ import annotations

import base64
import datetime
import logging
from typing import Any, Callable

import pyarrow as pa

from lakelog.platform.errors import InvalidRequest
from lakelog.platform.log import TopicLog
from lakelog.platform.typed.column import TYPED_COLUMN

log = logging.getLogger(__name__)

Render = Callable[[Any], Any]
NO_FIELDS = pa.struct([])  # a typed topic with no schema seen yet: every record's fields are null


def require_typed(topic_log: TopicLog) -> None:
    """InvalidRequest unless the topic is typed now (`confluent.value.schema.validation=true`)."""
    column = topic_log.typed_column
    if column is None or not column.enabled:
        log.info("fetch of %s refused: %s asked of a topic that is not typed", topic_log.name, TYPED_COLUMN)
        raise InvalidRequest(f"topic {topic_log.name!r} is not typed (confluent.value.schema.validation is "
                             f"false): its values have no {TYPED_COLUMN} fields; fetch without {TYPED_COLUMN}")


def typed_values(topic_log: TopicLog, records: pa.Table) -> pa.StructArray:
    """The fetched records' fields, one struct per record in their order (null: the value did not decode).
    Blocking: a schema id not seen before re-reads the registry's table."""
    require_typed(topic_log)
    column = topic_log.typed_column
    assert column is not None  # require_typed checked
    typed = column.values(records.column("value"), topic_log.typed_type()) if records.num_rows else None
    return typed if typed is not None else pa.nulls(records.num_rows, NO_FIELDS)


def json_rows(values: pa.Array | pa.ChunkedArray) -> list[Any]:
    """The values as JSON-safe Python values (see the module's doc), one per row."""
    render = _renderer(values.type)
    return [render(value) for value in values.to_pylist()]


def _renderer(kind: pa.DataType) -> Render:
    """A renderer built once per type; each takes `to_pylist`'s value of that type."""
    if pa.types.is_struct(kind):
        fields = [(field.name, _renderer(field.type)) for field in kind]
        return lambda v: None if v is None else {name: render(v.get(name)) for name, render in fields}
    if pa.types.is_map(kind):
        item = _renderer(kind.item_type)
        return lambda v: None if v is None else {str(k): item(x) for k, x in v}
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        element = _renderer(kind.value_type)
        return lambda v: None if v is None else [element(x) for x in v]
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        return lambda v: None if v is None else base64.b64encode(v).decode("ascii")
    if pa.types.is_timestamp(kind):
        return _timestamp
    if pa.types.is_date(kind):
        return lambda v: None if v is None else v.isoformat()
    if pa.types.is_decimal(kind):
        return lambda v: None if v is None else str(v)
    return _same


def _timestamp(value: datetime.datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(datetime.UTC).replace(tzinfo=None)
    return value.isoformat(timespec="microseconds") + "Z"


def _same(value: Any) -> Any:
    return value
