"""Streaming reads: stopped and restarted from the checkpoint, a query misses and repeats nothing."""

from __future__ import annotations

import time

import pytest

from lakelog.platform import Record
from tests.spark.conftest import all_records, spark_rows


def produce(broker, topic: str, start: int, count: int, partition: int | None = None) -> None:
    broker.produce(topic, [Record(f"v{start + i}".encode(), key=f"k{(start + i) % 11}".encode(), partition=partition)
                           for i in range(count)])


def start_query(spark, root: str, out: str, checkpoint: str, **options):
    reader = (spark.readStream.format("lakelog").option("lakelog.root", root).option("subscribe", "events")
              .option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return (reader.load().writeStream.format("parquet").option("path", out)
            .option("checkpointLocation", checkpoint).start())


def wait_for_batches(query, batches: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        progress = query.lastProgress
        if progress and progress["batchId"] >= batches:
            return
        time.sleep(0.1)
    raise AssertionError(f"the query did not reach batch {batches}")


def test_restart_from_checkpoint_misses_and_repeats_nothing(spark, root, broker, tmp_path):
    broker.create_topic("events", 2)
    for i in range(6):
        produce(broker, "events", i * 50, 50)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    query = start_query(spark, root, out, checkpoint, maxOffsetsPerTrigger="40")
    wait_for_batches(query, 2)
    query.stop()  # mid-stream: 300 records, at most 40 per batch
    read_so_far = spark.read.parquet(out).count()
    assert 0 < read_so_far < 300

    produce(broker, "events", 300, 30)
    broker.add_partitions("events", 3)  # a partition added while the query is down is picked up
    produce(broker, "events", 330, 20, partition=2)
    query = start_query(spark, root, out, checkpoint, maxOffsetsPerTrigger="40")
    query.processAllAvailable()
    produce(broker, "events", 350, 25)
    query.processAllAvailable()
    query.stop()

    assert spark_rows(spark.read.parquet(out).collect()) == all_records(broker, "events")


def test_without_rate_limit_one_batch_takes_everything(spark, root, broker, tmp_path):
    broker.create_topic("events", 2)
    produce(broker, "events", 0, 100)
    query = start_query(spark, root, str(tmp_path / "out"), str(tmp_path / "ck"))
    query.processAllAvailable()
    rows = query.lastProgress["numInputRows"] if query.lastProgress else 0
    batches = query.lastProgress["batchId"]
    query.stop()
    assert batches == 0 and rows == 100


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_offsets_removed_before_read(spark, root, broker, tmp_path, fail_on_data_loss):
    from lakelog.spark_jobs.jobs import run_job

    broker.create_topic("events", 1, {"retention.bytes": "0"})
    produce(broker, "events", 0, 10)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ck")
    options = {"failOnDataLoss": str(fail_on_data_loss).lower()}
    query = start_query(spark, root, out, checkpoint, **options)
    query.processAllAvailable()
    query.stop()
    for i in range(3):
        produce(broker, "events", 10 + i * 10, 10)  # offsets 10..39, three files
    report = run_job("retention", broker)  # removes every closed file: offsets 0..29
    assert report.files_removed >= 3
    log_start = broker.list_offset("events", 0, "earliest")
    assert log_start == 30
    query = start_query(spark, root, out, checkpoint, **options)
    if fail_on_data_loss:
        with pytest.raises(Exception, match="failOnDataLoss"):
            query.processAllAvailable()
        query.stop()
        return
    query.processAllAvailable()
    query.stop()
    offsets = sorted(r.offset for r in spark.read.parquet(out).collect())
    assert offsets == list(range(10)) + list(range(30, 40))
