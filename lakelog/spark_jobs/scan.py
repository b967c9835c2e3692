"""Executor side of a read: the files of one offset range, as Arrow batches in Kafka's schema.

Files are read with pyarrow directly (no Delta, no JVM jars), row groups
pruned by their offset statistics. When a planned file is gone (a roll or a
compaction replaced it after planning), the range is re-planned from a fresh
snapshot and the read continues where it was.

A read ends by sparing the Python worker's next task the re-read of every zip on
its path (`spare_zip_rereads`): measured, that re-read was the largest cost of a task.
"""

from __future__ import annotations

import sys
import zipimport
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from lakelog.platform.log import TopicLog
from lakelog.platform.schema_registry.arrow_values import conformed
from lakelog.platform.segments.segment import read_offsets
from lakelog.platform.storage import Storage
from lakelog.platform.typed.column import TYPED_COLUMN
from lakelog.schemas import HEADERS_TYPE
from lakelog.spark_jobs.connection import Connection
from lakelog.spark_jobs.ranges import FileRef, OffsetRange, check_data_loss

READ_COLUMNS = ["offset", "timestamp", "timestamp_type", "key", "value"]
SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")
BATCH_ROWS = 65_536


def kafka_arrow_schema(include_headers: bool, value_typed: pa.DataType | None = None) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()), pa.field("offset", pa.int64()), pa.field("timestamp", SPARK_TIMESTAMP),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    if value_typed is not None:
        fields.append(pa.field(TYPED_COLUMN, value_typed))
    return pa.schema(fields)


KAFKA_DDL = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
             "timestampType int")
HEADERS_DDL = ", headers array<struct<key:string,value:binary>>"


def read_range(connection: Connection, rng: OffsetRange, include_headers: bool,
               fail_on_data_loss: bool, value_typed: pa.DataType | None = None) -> Iterator[pa.RecordBatch]:
    """`value_typed`: the typed column's declared type (source option valueTyped), None without it."""
    try:
        yield from _read_range(connection, rng, include_headers, fail_on_data_loss, value_typed)
    finally:
        spare_zip_rereads()


def spare_zip_rereads() -> None:
    """Drop the zip importers from this process's importer cache (before Python 3.12).

    PySpark's worker calls `importlib.invalidate_caches()` at the start of every task, and before
    Python 3.12 that makes every cached zip importer read its archive's directory again at once
    (CPython gh-103200). A worker's path holds pyspark.zip, py4j's zip and spark-core's jar (5,000
    entries), with an importer per package imported from them: about 0.4 s of CPU per task, more
    than reading 250,000 records. The cache is only a cache: an import that needs a zip importer
    again makes one, from the archive's directory zipimport keeps (the archives do not change
    while Spark runs; a file added later has a new path and is read afresh).
    """
    if sys.version_info >= (3, 12):  # invalidation is lazy there: nothing is read until used
        return
    cache = sys.path_importer_cache
    for path, finder in list(cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            cache.pop(path, None)


def _read_range(connection: Connection, rng: OffsetRange, include_headers: bool,
                fail_on_data_loss: bool, value_typed: pa.DataType | None) -> Iterator[pa.RecordBatch]:
    storage = connection.storage()
    columns = READ_COLUMNS + (["headers"] if include_headers else []) + ([TYPED_COLUMN] if value_typed else [])
    schema = kafka_arrow_schema(include_headers, value_typed)
    position = rng.start
    files = list(rng.files)
    while position < rng.end and files:
        ref = files.pop(0)
        if ref.max_offset < position:
            continue
        try:
            table = _read_file(storage, rng, ref, position, columns)
        except FileNotFoundError:
            position, files = _replan(storage, rng, position, fail_on_data_loss)
            continue
        if table.num_rows:
            position = int(table.column("offset")[-1].as_py()) + 1
            yield from to_kafka(table, rng.topic, rng.partition, schema).to_batches(BATCH_ROWS)
        else:
            position = max(position, ref.max_offset + 1)


def _read_file(storage: Storage, rng: OffsetRange, ref: FileRef, position: int, columns: list[str]) -> pa.Table:
    with storage.open_input(f"{rng.table_uri}/{ref.path}") as source:
        # Up to the file's last offset: a file another tool wrote may hold the partition's later runs too.
        return read_offsets(source, position, min(rng.end, ref.max_offset + 1), columns, row_groups=ref.row_groups,
                            partition=rng.partition)[0]


def _replan(storage: Storage, rng: OffsetRange, position: int, fail_on_data_loss: bool) -> tuple[int, list[FileRef]]:
    topic_log = TopicLog(storage, rng.topic)  # a fresh snapshot: the files that hold the range now
    p = rng.partition
    position = check_data_loss(rng.topic, p, position, topic_log.log_start_offset(p), topic_log.log_end_offset(p),
                               fail_on_data_loss)
    files = [FileRef.of(s) for s in topic_log.segments(p) if s.max_offset >= position and s.min_offset < rng.end]
    return position, files


def to_kafka(table: pa.Table, topic: str, partition: int, schema: pa.Schema) -> pa.Table:
    """TOPIC_FILE_SCHEMA columns to the columns of Spark's Kafka source."""
    n = table.num_rows
    arrays = [
        table.column("key"), table.column("value"),
        pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([topic])).cast(pa.string()),
        pa.array(np.full(n, partition, dtype=np.int32)),
        table.column("offset"),
        table.column("timestamp").cast(SPARK_TIMESTAMP),
        table.column("timestamp_type").cast(pa.int32()),
    ]
    if "headers" in schema.names:
        arrays.append(table.column("headers"))
    if TYPED_COLUMN in schema.names:  # a file written before the topic was typed has no such column
        kind = schema.field(TYPED_COLUMN).type
        stored = table.column(TYPED_COLUMN) if TYPED_COLUMN in table.column_names else pa.nulls(n, kind)
        arrays.append(conformed(stored, kind))
    return pa.Table.from_arrays(arrays, schema=schema)
