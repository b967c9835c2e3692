"""The source and a job against a real S3 endpoint on loopback (moto server: the `s3` fixture of tests/conftest.py)."""

from __future__ import annotations

import pytest

from lakelog.platform import Broker, Record
from lakelog.spark_jobs.jobs import run_job
from tests.spark.conftest import all_records, spark_rows

pytestmark = pytest.mark.s3


def test_source_and_roll_on_s3(spark, s3):
    root = s3.root()
    broker = Broker(root=root, storage=s3.options, linger_ms=0)
    try:
        broker.create_topic("s", 2, {"segment.bytes": "100000", "segment.ms": "1"})  # roll by age
        for i in range(6):
            broker.produce("s", [Record(f"v{i}-{j}".encode(), key=f"k{j}".encode()) for j in range(20)])
        reader = spark.read.format("lakelog").option("lakelog.root", root).option("subscribe", "s")
        for key, value in s3.options.items():
            reader = reader.option(f"lakelog.storage.{key}", value)
        before = all_records(broker, "s")
        assert spark_rows(reader.load().collect()) == before
        report = run_job("roll", broker, spark)
        assert report.commits == 1  # both partitions: their flushes were files shared by them (layout 2)
        assert all(len(broker.topic_log("s").segments(p)) == 1 and not broker.topic_log("s").segments(p)[0].shared
                   for p in range(2))
        assert all_records(broker, "s") == before
        assert spark_rows(reader.load().collect()) == before
    finally:
        broker.close()
