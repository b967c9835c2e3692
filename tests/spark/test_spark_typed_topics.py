"""A typed topic's table read by Spark: the Delta schema's `value_typed` struct is what Spark's own parquet
reader finds in the files (what `spark.read.format("delta")` presents: delta-spark's jars come from Maven,
which the test machines cannot reach, so the files are read under the table's schema, as Delta reads them);
and the `lakelog` source keeps Kafka's schema unless `valueTyped=true`."""

from __future__ import annotations

import io
import json

import fastavro
import pytest
from deltalake import DeltaTable
from pyspark.sql.types import StructType

from lakelog.platform import Record
from lakelog.platform.errors import InvalidConfig
from lakelog.platform.layout import topic_path
from lakelog.platform.schema_registry.wire_format import framed
from lakelog.platform.typed.column import TYPED_COLUMN
from lakelog.spark_jobs.scan import KAFKA_DDL
from tests.spark.conftest import read

V1 = {"type": "record", "name": "Reading", "fields": [
    {"name": "sensor", "type": "string"}, {"name": "celsius", "type": "double"},
    {"name": "tags", "type": {"type": "array", "items": "string"}}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "unit", "type": ["null", "string"], "default": None}]}


def encoded(schema_id: int, schema: dict, datum: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return framed(schema_id, out.getvalue())


@pytest.fixture()
def typed_topic(broker):
    """`readings`: one record before the topic was typed, then records of two schema versions."""
    registry = broker.schema_registry()
    v1, v2 = (registry.register("readings-value", json.dumps(s)) for s in (V1, V2))
    broker.create_topic("readings", partitions=1)
    broker.produce("readings", [Record(b"before typing")])
    broker.alter_topic_config("readings", {"confluent.value.schema.validation": "true"})
    broker.produce("readings", [Record(encoded(v1, V1, {"sensor": "a", "celsius": 20.5, "tags": ["x"]}))])
    broker.produce("readings", [Record(encoded(v2, V2, {"sensor": "b", "celsius": -3.0, "tags": [], "unit": "C"}))])
    return broker


EXPECTED = [None, {"sensor": "a", "celsius": 20.5, "tags": ["x"], "unit": None},
            {"sensor": "b", "celsius": -3.0, "tags": [], "unit": "C"}]


def as_dicts(rows) -> list:
    return [None if r is None else r.asDict(recursive=True) for r in rows]


def test_delta_schema_gives_spark_the_typed_struct(spark, root, typed_topic):
    uri = typed_topic.storage.uri(topic_path("readings"))
    table = DeltaTable(uri)
    schema = StructType.fromJson(json.loads(table.schema().to_json()))
    typed = schema[TYPED_COLUMN].dataType
    assert typed.simpleString() == "struct<sensor:string,celsius:double,tags:array<string>,unit:string>"
    files = spark.read.schema(schema).parquet(*table.file_uris())
    rows = files.orderBy("offset").select(TYPED_COLUMN).collect()
    assert as_dicts([r[0] for r in rows]) == EXPECTED
    assert files.filter(f"{TYPED_COLUMN}.celsius < 0").select(f"{TYPED_COLUMN}.sensor").collect()[0][0] == "b"


def test_lakelog_source_keeps_kafkas_schema_and_offers_the_typed_column(spark, root, typed_topic):
    plain = read(spark, root, subscribe="readings")
    assert plain.schema == StructType.fromDDL(KAFKA_DDL)

    typed = read(spark, root, subscribe="readings", valueTyped="true")
    assert typed.schema.fieldNames() == [*plain.schema.fieldNames(), TYPED_COLUMN]
    rows = typed.orderBy("offset").collect()
    assert as_dicts([r[TYPED_COLUMN] for r in rows]) == EXPECTED
    assert [bytes(r.value) for r in rows] == [bytes(r.value) for r in plain.orderBy("offset").collect()]


def test_value_typed_on_a_topic_without_the_column_is_refused(spark, root, broker):
    broker.create_topic("untyped", partitions=1)
    broker.produce("untyped", [Record(b"v")])
    with pytest.raises(Exception, match="no table of untyped has a value_typed column"):
        read(spark, root, subscribe="untyped", valueTyped="true").collect()
    with pytest.raises(InvalidConfig):
        from lakelog.spark_jobs.typed import typed_type
        typed_type({"lakelog.root": root, "subscribe": "untyped"})


def test_a_stream_reads_the_typed_column_as_declared_at_its_start(spark, root, typed_topic, tmp_path):
    """Records of a later, wider schema arriving while the stream runs are read under the declared type."""
    v3 = {**V2, "fields": [*V2["fields"], {"name": "site", "type": ["null", "string"], "default": None}]}
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    query = (spark.readStream.format("lakelog").option("lakelog.root", root).option("subscribe", "readings")
             .option("startingOffsets", "earliest").option("valueTyped", "true").load()
             .select("offset", TYPED_COLUMN).writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).start())
    try:
        query.processAllAvailable()
        schema_id = typed_topic.schema_registry().register("readings-value", json.dumps(v3))
        typed_topic.produce("readings", [Record(encoded(schema_id, v3, {
            "sensor": "c", "celsius": 1.0, "tags": ["y"], "unit": None, "site": "north"}))])
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.read.parquet(out).orderBy("offset").collect()
    assert as_dicts([r[TYPED_COLUMN] for r in rows]) == [*EXPECTED, {"sensor": "c", "celsius": 1.0, "tags": ["y"],
                                                                     "unit": None}]
