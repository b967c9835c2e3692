"""Spark benchmarks: the data source against spark.read.parquet, streaming reads, and the jobs.

`run(console, quick) -> list[Figure]` (wired into `make bench` by benchmarks/run.py).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.common import Figure

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

VALUE_BYTES = 100


def _fill(broker: Any, topic: str, partitions: int, records: int, batch: int = 50_000) -> None:
    rng = np.random.default_rng(7)
    done = 0
    while done < records:
        n = min(batch, records - done)
        values = pa.array([rng.bytes(VALUE_BYTES) for _ in range(n)], pa.binary())
        keys = pa.array([f"key-{i % 10_000}".encode() for i in range(done, done + n)], pa.binary())
        parts = pa.array((np.arange(done, done + n) % partitions).astype(np.int32))
        broker.produce(topic, pa.table({"key": keys, "value": values, "partition": parts}))
        done += n


def _timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def _batch_read(spark: Any, broker: Any, root: str, records: int) -> list[dict]:
    broker.create_topic("bench-read", 4)
    _fill(broker, "bench-read", 4, records)
    source = spark.read.format("lakelog").option("lakelog.root", root).option("subscribe", "bench-read")
    # The table's data files: one per commit, each holding every partition's rows (one row group each).
    files = f"{broker.topic_log('bench-read').uri}/*.parquet"
    source.load().count()  # warm both paths (Python workers, JIT)
    spark.read.parquet(files).count()
    ours, n1 = _timed(lambda: source.load().selectExpr("sum(length(value))", "count(*)").collect())
    theirs, n2 = _timed(lambda: spark.read.parquet(files).selectExpr("sum(length(value))", "count(*)").collect())
    ratio = (records / ours) / (records / theirs)
    return [
        {"name": "spark batch read, lakelog source", "value": round(records / ours), "unit": "records/s"},
        {"name": "spark batch read, spark.read.parquet (same files)", "value": round(records / theirs),
         "unit": "records/s"},
        {"name": "lakelog source vs parquet", "value": round(ratio, 2), "unit": "x", "target": ">= 0.9",
         "met": ratio >= 0.9},
    ]


def _stream_read(spark: Any, root: str, records: int, max_offsets: int | None) -> list[dict]:
    """Two figures: end to end (`processAllAvailable` from the query's start, which includes Spark starting a
    Python process for the source's offsets), and while reading (the micro-batches' own time as Spark reports
    it, `triggerExecution`: planning, reading, the checkpoint's commits)."""
    reader = (spark.readStream.format("lakelog").option("lakelog.root", root).option("subscribe", "bench-read")
              .option("startingOffsets", "earliest"))
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    checkpoint = tempfile.mkdtemp()
    started = time.perf_counter()
    query = reader.load().writeStream.format("noop").option("checkpointLocation", checkpoint).start()
    query.processAllAvailable()
    seconds = time.perf_counter() - started
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    query.stop()
    shutil.rmtree(checkpoint, ignore_errors=True)
    reading = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    label = f"maxOffsetsPerTrigger={max_offsets}" if max_offsets else "maxOffsetsPerTrigger unset"
    return [
        {"name": f"spark streaming read, {label}, end to end", "value": round(records / seconds),
         "unit": "records/s", "note": f"{len(batches)} micro-batches, {seconds:.2f} s"},
        {"name": f"spark streaming read, {label}, while reading", "value": round(records / reading),
         "unit": "records/s", "note": f"{reading:.2f} s in micro-batches"},
    ]


def _stream_ratios(stream: list[dict], batch_rate: float) -> list[dict]:
    out = []
    for figure in stream:
        ratio = figure["value"] / batch_rate
        out.append({"name": f"{figure['name'].replace('spark streaming read', 'streaming')} vs batch read",
                    "value": round(ratio, 2), "unit": "x", "target": ">= 0.8", "met": ratio >= 0.8})
    return out


SEGMENTS_PER_PARTITION = 5  # compact and retention: what the roll before them leaves (4 closed, 1 active)


def _job_sizes(spark: Any, broker: Any, job: str, sizes: list[int]) -> list[dict]:
    """Each job timed over a topic it has work on. A producer's commits are shared files (every partition's
    slice of a flush in one file), which compaction and retention never take: they wait for a roll to
    rewrite them into per-partition segments, and keep the last one (the active segment). So for those two
    jobs a roll first (not timed) cuts each partition into `SEGMENTS_PER_PARTITION` segments."""
    from lakelog.spark_jobs.jobs import run_job

    out = []
    for records in sizes:
        topic = f"bench-{job}-{records}"
        segment_bytes = _stored_bytes(records) // (2 * SEGMENTS_PER_PARTITION)
        config = {"segment.bytes": str(512 * 1024 * 1024), "segment.ms": "1"}
        if job == "compact":  # keys repeat every 10,000 records: most of each closed segment is superseded
            config = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
        if job == "retention":
            config = {"retention.bytes": "0", "segment.bytes": str(segment_bytes)}
        broker.create_topic(topic, 2, config)
        _fill(broker, topic, 2, records, batch=max(records // 20, 1))  # 20 files per partition's worth of commits
        if job != "roll":
            _checked(run_job("roll", broker, spark, topics=[topic]), topic)
        log = broker.committed_log(topic)
        log.refresh()
        size = sum(f.size_bytes for p in range(2) for f in log.segments(p))
        files = len({f.path for p in range(2) for f in log.segments(p)})
        seconds, report = _timed(partial(run_job, job, broker, spark, topics=[topic]))
        _checked(report, topic)
        note = f"{report.commits} commits, {report.files_removed} files removed"
        if job == "retention":
            out.append({"name": f"{job}, {records} records ({size / 1e6:.1f} MB, {files} files)",
                        "value": round(seconds, 3), "unit": "s",
                        "note": f"{note}, {report.bytes_in / 1e6:.1f} MB"})
            continue
        note += f", {report.bytes_in / 1e6:.1f} MB in, {seconds:.2f} s"
        if job == "compact":
            note += f", {report.records_in} records in, {report.records_out} out"
        out.append({"name": f"{job}, {records} records ({size / 1e6:.1f} MB, {files} files)",
                    "value": round(report.bytes_in / 1e6 / seconds, 1), "unit": "MB/s", "note": note})
    return out


def _stored_bytes(records: int) -> int:
    """About what `_fill` stores per record: the value, a key of about 8 bytes, offsets and timestamps."""
    return records * (VALUE_BYTES + 14)


def _checked(report: Any, topic: str) -> Any:
    """A job that committed nothing did no work: its time is no figure."""
    if report.commits == 0:
        raise RuntimeError(f"the {report.job} job committed nothing on {topic} ({report.unchanged} partitions "
                           f"unchanged, {len(report.plans)} planned): the bench measures no work")
    return report


def _warm_up(spark: Any, broker: Any) -> None:
    """One small run of each job first, so the timed runs do not pay for Python workers starting."""
    from lakelog.spark_jobs.jobs import run_job

    segment_bytes = _stored_bytes(20_000) // (2 * SEGMENTS_PER_PARTITION)
    broker.create_topic("bench-warm-up", 2, {"cleanup.policy": "compact,delete", "segment.bytes": str(segment_bytes),
                                             "retention.bytes": "0"})
    _fill(broker, "bench-warm-up", 2, 20_000, batch=2_000)  # keys repeat every 10,000: compaction has work
    for job in ("roll", "compact", "retention"):
        _checked(run_job(job, broker, spark, topics=["bench-warm-up"]), "bench-warm-up")


def run(console: Any, quick: bool = False) -> list[Figure]:
    figures = [Figure("spark", f["name"], f["value"], f["unit"], f.get("target", ""), f.get("met"),
                      f.get("ratio"), f.get("note", "")) for f in _run(console, quick)]
    return figures


def _run(console: Any, quick: bool) -> list[dict]:
    from pyspark.sql import SparkSession

    from lakelog.platform import Broker
    from lakelog.spark_jobs import register

    spark = (SparkSession.builder.master("local[2]").appName("lakelog-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    root = tempfile.mkdtemp(prefix="lakelog-bench-spark-")
    broker = Broker(root=root, linger_ms=0)
    figures: list[dict] = []
    try:
        records = 200_000 if quick else 1_000_000
        console.print(f"spark: batch read of {records} records")
        batch = _batch_read(spark, broker, root, records)
        figures += batch
        console.print("spark: streaming read")
        _stream_read(spark, root, records, None)  # warm the streaming path's JVM code, as the batch read's is
        for max_offsets in (None, 100_000):
            stream = _stream_read(spark, root, records, max_offsets)
            figures += stream + _stream_ratios(stream, batch[0]["value"])
        _warm_up(spark, broker)
        sizes = [50_000, 200_000] if quick else [100_000, 400_000]
        for job in ("roll", "compact", "retention"):
            console.print(f"spark: {job} at two sizes")
            figures += _job_sizes(spark, broker, job, sizes)
    finally:
        broker.close()
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    return figures


if __name__ == "__main__":
    from rich.console import Console

    for figure in run(Console(), quick="--quick" in sys.argv):
        print(figure)
