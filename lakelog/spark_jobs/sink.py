"""The `lakelog` sink: `write` and `writeStream` with `.format("lakelog")`, exactly once per micro-batch.

Columns as in Spark's Kafka sink: `topic` (or the `topic` option, which wins),
`value`, and optional `key`, `headers`, `partition`; other columns are
ignored. Executors stage their rows in parquet files under
`<root>/_staging/sink/`; the driver commits each topic's rows in one Delta
commit with `SetTransaction("lakelog.sink.<query id>", <batch id>)`.

Why the driver writes the final files: offsets are materialized in the data
files and assigned at commit time (the partition's log end offset), so a
file written before the commit would have to be rewritten whenever another
producer moved the log end meanwhile. Staging keeps the executors' work
(conversion, partitioning input) in parallel and the commit dense and unique;
`append_exactly_once` refuses a batch id the table already holds, so a batch
replayed after a crash is not written twice. The query id is the one Spark
keeps in the checkpoint (so it survives restarts); the write tasks read it from
the `sql.streaming.queryId` property Spark gives every task of a micro-batch,
which works whether the checkpoint comes from the `checkpointLocation` option
or from the session's `spark.sql.streaming.checkpointLocation`.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from lakelog.platform.errors import InvalidConfig, InvalidRecord
from lakelog.platform.layout import SINK_STAGING
from lakelog.schemas import HEADERS_TYPE
from lakelog.spark_jobs.connection import Connection
from lakelog.spark_jobs.options import SINK_REFUSED_KAFKA_OPTIONS, refuse_kafka_options

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class StagedFile:
    topic: str
    uri: str
    rows: int


@dataclass
class SinkMessage(WriterCommitMessage):
    files: list[StagedFile]
    query_id: str | None = None  # the streaming query's id, for the exactly-once commit


QUERY_ID_PROPERTY = "sql.streaming.queryId"  # set by Spark on every task of a streaming query


def check_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """Refuse a DataFrame the sink cannot write, on the driver, before any task runs."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise InvalidConfig("the lakelog sink needs a 'value' column (binary or string)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (BinaryType, StringType)):
            raise InvalidConfig(f"column {name!r} must be binary or string, got {fields[name].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise InvalidConfig(f"column 'partition' must be int, got {fields['partition'].simpleString()}")
    if "headers" in fields and fields["headers"].simpleString() != "array<struct<key:string,value:binary>>":
        raise InvalidConfig("column 'headers' must be array<struct<key:string,value:binary>>, got "
                            f"{fields['headers'].simpleString()}")
    if not topic_option and "topic" not in fields:
        raise InvalidConfig("the lakelog sink needs a 'topic' column or the 'topic' option")
    if not topic_option and not isinstance(fields["topic"], StringType):
        raise InvalidConfig(f"column 'topic' must be string, got {fields['topic'].simpleString()}")


class _SinkBase(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        if overwrite:
            raise InvalidConfig("the lakelog sink only appends: a log is never overwritten; use .mode(\"append\")")
        refuse_kafka_options(opts, SINK_REFUSED_KAFKA_OPTIONS)
        self.connection = Connection.from_options(opts)
        self.topic_option = opts.get("topic")
        check_sink_schema(schema, self.topic_option)
        self.options = opts

    # ---- executors ----------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkMessage:
        query_id = self._task_query_id()  # before staging anything: a refusal leaves no files behind
        storage = self.connection.storage()
        by_topic: dict[str, list[pa.Table]] = defaultdict(list)
        for batch in iterator:
            for topic, table in self._split(pa.Table.from_batches([batch])):
                by_topic[topic].append(table)
        staged = []
        for topic, tables in by_topic.items():
            table = pa.concat_tables(tables, promote_options="permissive")
            uri = storage.uri(SINK_STAGING, topic, f"{uuid.uuid4().hex}.parquet")
            storage.makedirs(storage.uri(SINK_STAGING, topic))
            with storage.arrow_fs.open_output_stream(storage.fs_path(uri)) as out:
                pq.write_table(table, out, compression="snappy")
            staged.append(StagedFile(topic, uri, table.num_rows))
        return SinkMessage(staged, query_id)

    def _task_query_id(self) -> str | None:
        return None

    def _split(self, table: pa.Table) -> Iterator[tuple[str, pa.Table]]:
        rows = _sink_columns(table)
        if self.topic_option:
            yield self.topic_option, rows
            return
        topics = table.column("topic")
        if topics.null_count:
            raise InvalidRecord("a row has a null 'topic' and no 'topic' option is set")
        for topic in pc.unique(topics).to_pylist():
            yield topic, rows.filter(pc.equal(topics, topic))

    # ---- driver ---------------------------------------------------------------

    def _staged_by_topic(self, messages: list) -> dict[str, pa.Table]:
        storage = self.connection.storage()
        grouped: dict[str, list[pa.Table]] = defaultdict(list)
        for message in messages:
            for f in (message.files if message is not None else []):
                with storage.open_input(f.uri) as source:
                    grouped[f.topic].append(pq.read_table(source))
        return {t: pa.concat_tables(ts, promote_options="permissive") for t, ts in grouped.items()}

    def _delete_staged(self, messages: list) -> None:
        uris = [f.uri for m in messages if m is not None for f in m.files]
        self.connection.storage().delete_files(uris)

    def abort(self, messages: list, batchId: int | None = None) -> None:  # noqa: N803 (Spark's name)
        self._delete_staged(messages)


class LakelogBatchWriter(_SinkBase):
    def commit(self, messages: list) -> None:
        tables = self._staged_by_topic(messages)
        broker = self.connection.broker()
        try:
            for topic, table in tables.items():
                if table.num_rows:
                    broker.produce(topic, _for_produce(table))
        finally:
            broker.close()
        self._delete_staged(messages)


class LakelogStreamWriter(_SinkBase, DataSourceStreamWriter):
    """Spark refuses a streaming query without a checkpoint (option or session setting) before the sink runs."""

    def _task_query_id(self) -> str | None:
        from pyspark import TaskContext

        context = TaskContext.get()
        found = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
        if not found:
            raise InvalidConfig(f"the lakelog sink found no streaming query id ({QUERY_ID_PROPERTY}) in its task: "
                                "it commits exactly once per query and batch, so it only runs in streaming queries")
        return found

    def commit(self, messages: list, batchId: int | None = None) -> None:  # noqa: N803 (Spark's name)
        # Spark's stream writer always passes batchId: the default only keeps the signature of the Arrow
        # (batch) writer's commit(messages), which this class also is so that Spark hands it Arrow batches.
        if batchId is None:
            raise InvalidConfig("the lakelog stream sink commits a micro-batch by its id, and was given none")
        if not any(m is not None and m.files for m in messages):
            return  # an empty micro-batch: nothing staged, nothing to commit
        app_id = f"lakelog.sink.{sink_query_id(messages)}"
        tables = self._staged_by_topic(messages)
        broker = self.connection.broker()
        try:
            for topic, table in sorted(tables.items()):
                if not table.num_rows:
                    continue
                result = broker.append_exactly_once(topic, _for_produce(table), app_id, batchId)
                if result is None:
                    log.info("batch %d of %s already in %s: not written again", batchId, app_id, topic)
        finally:
            broker.close()
        self._delete_staged(messages)


def sink_query_id(messages: list) -> str:
    """The one query id the tasks of a micro-batch report (Spark's id, kept in the checkpoint)."""
    ids = {m.query_id for m in messages if m is not None and m.files}
    if len(ids) != 1 or None in ids:
        raise InvalidConfig(f"the tasks of one micro-batch reported streaming query ids {sorted(map(str, ids))}; "
                            "expected exactly one")
    return str(ids.pop())


def _sink_columns(table: pa.Table) -> pa.Table:
    n = table.num_rows
    names = set(table.column_names)
    columns = {
        "key": _binary(table.column("key")) if "key" in names else pa.nulls(n, pa.binary()),
        "value": _binary(table.column("value")),
        "headers": table.column("headers").cast(HEADERS_TYPE) if "headers" in names else pa.nulls(n, HEADERS_TYPE),
        "partition": table.column("partition").cast(pa.int32()) if "partition" in names else pa.nulls(n, pa.int32()),
    }
    return pa.table(columns)


def _binary(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return column if pa.types.is_binary(column.type) else column.cast(pa.binary())


def _for_produce(table: pa.Table) -> pa.Table:
    if table.column("partition").null_count == table.num_rows:
        table = table.drop_columns(["partition"])
    if table.column("headers").null_count == table.num_rows:
        table = table.drop_columns(["headers"])
    return table
