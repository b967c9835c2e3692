"""One local SparkSession for every Spark test (startup costs seconds), and topic helpers."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def spark() -> Iterator["SparkSession"]:  # noqa: F821
    from pyspark.sql import SparkSession

    from lakelog.spark_jobs import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("lakelog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture()
def root(tmp_path) -> str:
    return str(tmp_path / "lake")


@pytest.fixture()
def broker(root):
    from lakelog.platform import Broker

    b = Broker(root=root, linger_ms=0)
    yield b
    b.close()


def read(spark, root: str, **options):
    """A batch read of the lakelog source with these options."""
    reader = spark.read.format("lakelog").option("lakelog.root", root)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def all_records(broker, topic: str, include_headers: bool = False) -> list[tuple]:
    """Every record of a topic through the core's fetch: (topic, partition, offset, key, value, ts_ms, type[, headers])."""
    out = []
    meta = broker.topic(topic)
    broker.topic_log(topic).refresh()
    for p in range(meta.partitions):
        offset = broker.list_offset(topic, p, "earliest")
        end = broker.list_offset(topic, p, "latest")
        while offset < end:
            result = broker.fetch(topic, p, offset, max_records=10_000)
            for r in result:
                row = (topic, p, r.offset, r.key, r.value, r.timestamp_ms, r.timestamp_type)
                out.append(row + ((tuple(r.headers),) if include_headers else ()))
            if result.next_offset is None:
                break
            offset = result.next_offset
    return sorted(out)


def spark_rows(rows, include_headers: bool = False) -> list[tuple]:
    """Rows of the lakelog/Kafka schema in the shape of `all_records`."""
    out = []
    for r in rows:
        row = (r.topic, r.partition, r.offset, None if r.key is None else bytes(r.key),
               None if r.value is None else bytes(r.value), _ms(r.timestamp), r.timestampType)
        if include_headers:
            row += (tuple((h.key, bytes(h.value)) for h in (r.headers or [])),)
        out.append(row)
    return sorted(out)


def _ms(moment) -> int:
    from datetime import timezone

    return round(moment.replace(tzinfo=timezone.utc).timestamp() * 1000)
