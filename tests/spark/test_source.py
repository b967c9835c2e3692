"""Batch reads through spark.read.format("lakelog") equal what the core's fetch returns."""

from __future__ import annotations

import json

import pytest

from lakelog.platform import Record
from tests.spark.conftest import all_records, read, spark_rows

BASE_TS = 1_700_000_000_000


@pytest.fixture()
def topics(broker):
    """Two topics: orders (3 partitions, keyed, with headers, timestamps 1 s apart) and audit (1 partition)."""
    broker.create_topic("orders", 3)
    broker.create_topic("audit", 1)
    for batch in range(4):  # several commits: several files per partition
        broker.produce("orders", [
            Record(f"order-{batch}-{i}".encode(), key=f"customer-{i % 7}".encode(),
                   headers=[("source", b"test"), ("batch", str(batch).encode())],
                   timestamp_ms=BASE_TS + (batch * 25 + i) * 1000)
            for i in range(25)
        ])
    broker.produce("audit", [Record(f"audit-{i}".encode(), timestamp_ms=BASE_TS + i) for i in range(10)])
    return broker


def test_whole_topic_with_headers_equals_fetch(spark, root, topics):
    df = read(spark, root, subscribe="orders", includeHeaders="true")
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert spark_rows(df.collect(), include_headers=True) == all_records(topics, "orders", include_headers=True)


def test_schema_without_headers_is_kafkas(spark, root, topics):
    df = read(spark, root, subscribe="audit")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int")]


def test_offset_range_json(spark, root, topics):
    starting = {"orders": {"0": 3, "1": -2, "2": 10}}
    ending = {"orders": {"0": 20, "1": 5, "2": -1}}
    df = read(spark, root, subscribe="orders", startingOffsets=json.dumps(starting), endingOffsets=json.dumps(ending))
    ends = {0: 20, 1: 5, 2: topics.list_offset("orders", 2, "latest")}
    starts = {0: 3, 1: 0, 2: 10}
    expected = [r for r in all_records(topics, "orders") if starts[r[1]] <= r[2] < ends[r[1]]]
    assert expected and spark_rows(df.collect()) == expected


def test_assign_and_pattern(spark, root, topics):
    assigned = read(spark, root, assign=json.dumps({"orders": [1], "audit": [0]}))
    expected = [r for r in all_records(topics, "orders") if r[1] == 1] + all_records(topics, "audit")
    assert spark_rows(assigned.collect()) == sorted(expected)
    pattern = read(spark, root, subscribePattern="ord.*")
    assert spark_rows(pattern.collect()) == all_records(topics, "orders")
    assert read(spark, root, subscribePattern="nothing-.*").count() == 0


def test_starting_timestamp_and_by_partition(spark, root, topics):
    cutoff = BASE_TS + 60_000
    df = read(spark, root, subscribe="orders", startingTimestamp=str(cutoff))
    first = {p: topics.list_offset("orders", p, cutoff) for p in range(3)}
    expected = [r for r in all_records(topics, "orders") if r[2] >= first[r[1]]]
    assert spark_rows(df.collect()) == expected
    assert all(r[5] >= cutoff for r in expected[:1])
    by_partition = read(spark, root, subscribe="orders",
                        startingOffsetsByTimestamp=json.dumps({"orders": {"0": cutoff, "1": BASE_TS, "2": cutoff}}))
    first[1] = 0
    assert spark_rows(by_partition.collect()) == [r for r in all_records(topics, "orders") if r[2] >= first[r[1]]]


def test_min_partitions_splits_ranges_not_records(spark, root, topics):
    df = read(spark, root, subscribe="orders", minPartitions="9")
    assert df.rdd.getNumPartitions() >= 9
    assert spark_rows(df.collect()) == all_records(topics, "orders")


def test_bad_options_fail_clearly(spark, root, topics):
    with pytest.raises(Exception, match="exactly one of the options 'subscribe'"):
        read(spark, root).collect()
    with pytest.raises(Exception, match="startingOffsets.*not valid JSON"):
        read(spark, root, subscribe="orders", startingOffsets="{bad").collect()
    with pytest.raises(Exception, match="does not exist"):
        read(spark, root, subscribe="no-such-topic").collect()
    with pytest.raises(Exception, match="lakelog.root"):
        spark.read.format("lakelog").option("subscribe", "orders").load().collect()


def kafka_query(spark, fmt: str, connection: dict[str, str]):
    """A query written for Spark's Kafka source: only `fmt` and `connection` change between systems."""
    reader = spark.read.format(fmt)
    for key, value in connection.items():
        reader = reader.option(key, value)
    return (reader.option("subscribe", "orders")
            .option("startingOffsets", "earliest").option("endingOffsets", "latest")
            .option("failOnDataLoss", "false").option("includeHeaders", "true")
            .option("kafka.group.id", "ignored-by-lakelog")
            .load()
            .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic", "partition",
                        "offset", "timestamp", "timestampType", "headers")
            .where("key = 'customer-3'"))


def test_kafka_query_runs_unchanged(spark, root, topics):
    rows = kafka_query(spark, "lakelog", {"lakelog.root": root}).collect()
    expected = [r for r in all_records(topics, "orders") if r[3] == b"customer-3"]
    assert sorted((r.topic, r.partition, r.offset, r.value) for r in rows) == \
        [(t, p, o, v.decode()) for t, p, o, _, v, _, _ in expected]
