"""Arrow schemas of the Delta tables lakelog writes.

A topic table is partitioned by `partition`; Delta keeps partition columns out
of the data files, so the files hold `TOPIC_FILE_SCHEMA` and readers add the
partition from the file's partition value.
"""

from __future__ import annotations

import pyarrow as pa

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")

TOPIC_FILE_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", TIMESTAMP_TYPE, nullable=False),
        pa.field("timestamp_type", pa.int8(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
        pa.field("producer_id", pa.int64()),
        pa.field("producer_epoch", pa.int16()),
        pa.field("sequence", pa.int32()),
    ]
)

TOPIC_SCHEMA = pa.schema([pa.field("partition", pa.int32(), nullable=False), *TOPIC_FILE_SCHEMA])

CATALOG_SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False),
        pa.field("generation", pa.int64(), nullable=False),
        pa.field("partitions", pa.int32(), nullable=False),
        pa.field("config", pa.string(), nullable=False),
        pa.field("deleted", pa.bool_(), nullable=False),
        pa.field("created", TIMESTAMP_TYPE, nullable=False),
        pa.field("updated", TIMESTAMP_TYPE, nullable=False),
    ]
)

CONSUMER_OFFSETS_SCHEMA = pa.schema(
    [
        pa.field("group", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("metadata", pa.string()),
        pa.field("generation", pa.int32()),
        pa.field("committed", TIMESTAMP_TYPE, nullable=False),
    ]
)
