"""The source option `valueTyped=true`: after Kafka's columns, a typed topic's `value_typed` struct (the value
decoded with its registered schema, written by lakelog's flush: platform/typed/column.py).

The column's type is declared on the driver from the subscribed topics' tables (their types merged); each
file's column is read as that type (fields added later null in older files, records written before the
topic was typed null). Without the option the source has exactly the schema of Spark's Kafka source.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_type
from pyspark.sql.types import StructType

from lakelog.platform.errors import InvalidConfig
from lakelog.platform.schema_registry.arrow_types import TypeConflict, merged
from lakelog.platform.typed.column import TYPED_COLUMN
from lakelog.spark_jobs.connection import Connection
from lakelog.spark_jobs.options import parse_subscription

OPTION = "valueTyped"


def requested(options: Mapping[str, str]) -> bool:
    """Whether the query asks for the typed column (its value is checked by SourceOptions.parse)."""
    return any(str(k).lower() == OPTION.lower() and str(v).strip().lower() == "true" for k, v in options.items())


def typed_type(options: Mapping[str, str]) -> pa.StructType:
    """The subscribed topics' `value_typed` types merged; InvalidConfig when none has the column, or when
    their types conflict."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    reader = Connection.from_options(opts).reader()
    try:
        topics = sorted({topic for topic, _ in parse_subscription(opts).resolve(reader)})
        kind: pa.StructType | None = None
        for topic in topics:
            topic_log = reader.topic_log(topic)
            topic_log.refresh()
            found = topic_log.typed_type()
            try:
                kind = kind if found is None else merged(kind, found)
            except TypeConflict as exc:
                raise InvalidConfig(f"option {OPTION!r}: the topics' typed columns conflict: {exc}") from None
    finally:
        reader.close()
    if kind is None:
        raise InvalidConfig(f"option {OPTION!r}: no table of {', '.join(topics) or 'the subscribed topics'} has a "
                            f"{TYPED_COLUMN} column yet (a topic with confluent.value.schema.validation=true gets "
                            "one at its first flush of records in Confluent's wire format)")
    return kind


def spark_schema(kafka: pa.Schema, kind: pa.StructType) -> StructType:
    return from_arrow_schema(kafka.append(pa.field(TYPED_COLUMN, kind)))


def declared_type(schema: StructType) -> pa.DataType | None:
    """The typed column's Arrow type as the query declared it (None: not asked for)."""
    if TYPED_COLUMN not in schema.fieldNames():
        return None
    return to_arrow_type(schema[TYPED_COLUMN].dataType)
