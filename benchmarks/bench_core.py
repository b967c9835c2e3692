"""Core benchmarks (issue: the log core): produce and fetch against their raw ceilings, in one run.

Shape: local folder, 8 partitions, 16-byte keys, 100-byte values.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable, write_deltalake
from rich.console import Console

from benchmarks.common import Figure, percentile, rss_mb, server_heap
from lakelog.platform import Broker, Record
from lakelog.platform.catalog.catalog import MAX_PARTITIONS
from lakelog.platform.log import CHECKPOINT_INTERVAL, TOPIC_TABLE_PROPERTIES
from lakelog.schemas import TOPIC_SCHEMA
from lakelog.settings import Settings

SUITE = "core"
PARTITIONS = 8
FLUSH_RECORDS = 8 * 1250  # records per commit, the same for ceiling and lakelog
KEY_BYTES, VALUE_BYTES = 16, 100
ROUNDS = 3


def _keys_values(n: int, seed: int = 1) -> tuple[list[bytes], list[bytes]]:
    rng = np.random.default_rng(seed)
    keys = [bytes(row) for row in rng.integers(97, 123, size=(n, KEY_BYTES), dtype=np.uint8)]
    value = b"v" * VALUE_BYTES
    return keys, [value] * n


def _ceiling_table(keys: list[bytes], values: list[bytes], base: int) -> pa.Table:
    n = len(keys)
    parts = np.arange(n, dtype=np.int32) % PARTITIONS
    return pa.Table.from_arrays([
        pa.array(parts), pa.array(np.arange(base, base + n, dtype=np.int64)),
        pa.array(np.full(n, int(time.time() * 1000), dtype=np.int64)).cast(pa.timestamp("ms", tz="UTC")),
        pa.array(np.zeros(n, dtype=np.int8)), pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
        pa.nulls(n, TOPIC_SCHEMA.field("headers").type), pa.nulls(n, pa.int64()), pa.nulls(n, pa.int16()),
        pa.nulls(n, pa.int32()),
    ], schema=TOPIC_SCHEMA)


def bench_ceiling(work: str, flushes: int, name: str = "ceiling") -> float:
    """delta-rs appends of pre-built Arrow tables, one commit per flush, through one DeltaTable object.

    Done as well as delta-rs allows: the table is reloaded after each checkpoint, as lakelog does,
    since delta-rs's in-memory snapshot otherwise makes every commit slower than the last.
    """
    keys, values = _keys_values(FLUSH_RECORDS)
    tables = [_ceiling_table(keys, values, i * FLUSH_RECORDS) for i in range(flushes)]
    uri = os.path.join(work, name)
    dt = DeltaTable.create(uri, schema=TOPIC_SCHEMA, partition_by=["partition"],
                           configuration=TOPIC_TABLE_PROPERTIES)
    start = time.perf_counter()
    for table in tables:
        write_deltalake(dt, table, mode="append")
        if dt.version() % CHECKPOINT_INTERVAL == 0:
            dt = DeltaTable(uri)
    return flushes * FLUSH_RECORDS / (time.perf_counter() - start)


def bench_produce(broker: Broker, topic: str, flushes: int, arrow: bool) -> float:
    """lakelog produce: calls of FLUSH_RECORDS records, one in flight (so one flush per call)."""
    keys, values = _keys_values(FLUSH_RECORDS, seed=2)
    if arrow:
        batch = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})
        payloads = [batch] * flushes
    else:
        records = [Record(v, key=k) for k, v in zip(keys, values)]
        payloads = [records] * flushes
    broker.create_topic(topic, PARTITIONS)
    start = time.perf_counter()
    for payload in payloads:
        broker.produce(topic, payload)
    return flushes * FLUSH_RECORDS / (time.perf_counter() - start)


def bench_fetch(broker: Broker, topic: str) -> tuple[float, float]:
    """Fetch every partition from earliest as Arrow vs a raw pyarrow read of the same files."""
    log = broker.topic_log(topic)
    cold = Broker(broker.settings)  # a fresh node: no tail cache, reads files
    try:
        total = 0
        start = time.perf_counter()
        for p in range(PARTITIONS):
            offset = 0
            while True:
                result = cold.fetch(topic, p, offset, max_records=50_000)
                if result.next_offset is None:
                    break
                total += result.records.num_rows
                offset = result.next_offset
        ours = total / (time.perf_counter() - start)
    finally:
        cold.close()
    files = sorted({f"{log.uri}/{s.path}" for p in range(PARTITIONS) for s in log.segments(p)})  # shared files once
    start = time.perf_counter()
    raw = ds.dataset(files, format="parquet").to_table()
    ceiling = raw.num_rows / (time.perf_counter() - start)
    assert raw.num_rows == total, (raw.num_rows, total)
    return ours, ceiling


def bench_latency(work: str, rate: int, seconds: float, batch: int) -> tuple[float, float]:
    """Open-loop: `rate` records/s offered in calls of `batch` records; latency from submit to ack. The heap
    set up before is frozen, as the server's is (`server_heap`): this process's start-up (pyarrow, delta-rs,
    the earlier benchmarks) otherwise makes each full collection a pause of 50-190 ms on this machine."""
    broker = Broker(Settings(root=os.path.join(work, "latency"), linger_ms=5))
    broker.create_topic("lat", PARTITIONS)
    keys, values = _keys_values(batch, seed=3)
    records = [Record(v, key=k) for k, v in zip(keys, values)]
    latencies: list[float] = []
    lock = threading.Lock()
    all_answered = threading.Event()
    interval = batch / rate
    calls = int(seconds * rate / batch)
    with server_heap():
        start = time.perf_counter()
        for i in range(calls):
            due = start + i * interval
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            sent = time.perf_counter()
            future = broker.produce_async("lat", records)

            def done(answered: Future, sent: float = sent) -> None:
                answered.result()  # a failed call fails the benchmark
                with lock:
                    latencies.append(time.perf_counter() - sent)
                    if len(latencies) == calls:
                        all_answered.set()

            future.add_done_callback(done)  # the answered calls are not kept: the heap stays the server's
        all_answered.wait(60)
    assert len(latencies) == calls, f"{calls - len(latencies)} calls not answered"
    broker.close()
    return percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000


def bench_memory(work: str, rate: int, seconds: float) -> tuple[float, float]:
    """Steady produce at `rate` records/s (calls of 1,000): peak resident memory of this process."""
    broker = Broker(Settings(root=os.path.join(work, "memory"), linger_ms=5))
    broker.create_topic("mem", PARTITIONS)
    keys, values = _keys_values(1000, seed=4)
    batch = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})
    peak = rss_mb()
    start = time.perf_counter()
    calls = int(rate * seconds / 1000)
    pending: list[Future] = []
    for i in range(calls):
        delay = start + i * 1000 / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        pending.append(broker.produce_async("mem", batch))
        if i % 50 == 0:
            peak = max(peak, rss_mb())
            pending = [f for f in pending if not f.done()]
    for f in pending:
        f.result()
    achieved = calls * 1000 / (time.perf_counter() - start)
    peak = max(peak, rss_mb())
    broker.close()
    return peak, achieved


def bench_reopen(work: str, commits: int) -> tuple[float, int]:
    """Open a 64-partition topic after `commits` commits and read every partition's offsets."""
    root = os.path.join(work, "reopen")
    broker = Broker(Settings(root=root))
    broker.create_topic("big", 64)
    log = broker.topic_log("big")
    keys, values = _keys_values(8, seed=5)
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})
    from lakelog.platform.records import arrow_to_table
    rows, _ = arrow_to_table(table)
    both = pa.concat_tables([rows, rows])
    for i in range(commits):
        partitions = np.array([(i * 3) % 64] * 8 + [(i * 7 + 1) % 64] * 8, dtype=np.int32)
        log.append(both, partitions, time.monotonic() + 60)
    broker.close()
    start = time.perf_counter()
    reopened = Broker(Settings(root=root))
    ends = [p.log_end_offset for p in reopened.describe_topic("big").partitions]
    elapsed = time.perf_counter() - start
    reopened.close()
    return elapsed, sum(ends)


def bench_largest_create(work: str) -> float:
    """Create a topic of the most partitions a topic may have (a local folder), in seconds."""
    broker = Broker(Settings(root=os.path.join(work, "largest")))
    start = time.perf_counter()
    broker.create_topic("largest", MAX_PARTITIONS)
    elapsed = time.perf_counter() - start
    broker.close()
    return elapsed


def run(console: Console, quick: bool = False) -> list[Figure]:
    figures: list[Figure] = []
    work = tempfile.mkdtemp(prefix="lakelog-bench-")
    flushes = 20 if quick else 60
    try:
        broker = Broker(Settings(root=os.path.join(work, "lakelog"), linger_ms=0))
        # Ceiling and lakelog interleaved over rounds, medians reported: the machine's noise hits both.
        rounds: dict[str, list[float]] = {"ceiling": [], "records": [], "arrow": []}
        for i in range(ROUNDS):
            console.log(f"core: produce round {i + 1}/{ROUNDS}: delta-rs ceiling, Record lists, Arrow batches")
            rounds["ceiling"].append(bench_ceiling(work, flushes, f"ceiling-{i}"))
            rounds["records"].append(bench_produce(broker, f"records-{i}", flushes, arrow=False))
            rounds["arrow"].append(bench_produce(broker, f"arrow-{i}", flushes, arrow=True))
        ceiling, records, arrow = (float(np.median(rounds[k])) for k in ("ceiling", "records", "arrow"))
        spread = {k: f"{min(v):,.0f}-{max(v):,.0f}" for k, v in rounds.items()}
        figures.append(Figure(SUITE, "ceiling: delta-rs append, 10,000 records/commit", ceiling, "records/s",
                              note=f"median of {ROUNDS}, range {spread['ceiling']}"))
        figures.append(Figure(SUITE, "produce, Python API (Record list), 10,000 records/call", records,
                              "records/s", ">= 0.5x ceiling", records / ceiling >= 0.5, records / ceiling,
                              note=f"median of {ROUNDS}, range {spread['records']}"))
        figures.append(Figure(SUITE, "produce, Arrow batch form, 10,000 records/call", arrow, "records/s",
                              ">= 0.8x ceiling", arrow / ceiling >= 0.8, arrow / ceiling,
                              note=f"median of {ROUNDS}, range {spread['arrow']}"))
        console.log("core: fetch from earliest as Arrow vs raw pyarrow read")
        fetch, raw = bench_fetch(broker, "arrow-0")
        figures.append(Figure(SUITE, "fetch from earliest as Arrow (fresh node)", fetch, "records/s",
                              ">= 0.5x raw pyarrow read", fetch / raw >= 0.5, fetch / raw))
        figures.append(Figure(SUITE, "raw pyarrow read of the same files", raw, "records/s"))
        broker.close()
        console.log("core: produce latency at 20,000 records/s offered, linger 5 ms")
        p50, p99 = bench_latency(work, 20_000, 5 if quick else 15, 20)
        figures.append(Figure(SUITE, "produce latency p50 at 20,000 records/s (calls of 20)", p50, "ms"))
        figures.append(Figure(SUITE, "produce latency p99 at 20,000 records/s (calls of 20)", p99, "ms",
                              "<= 50 ms", p99 <= 50))
        console.log("core: resident memory under steady produce at 100,000 records/s")
        # In a fresh process, so that the figure is the broker's, not this run's earlier data.
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            peak, achieved = pool.apply(bench_memory, (work, 100_000, 5 if quick else 20))
        figures.append(Figure(SUITE, "peak resident memory, steady produce (whole process)", peak, "MB",
                              "<= 500 MB", peak <= 500, note=f"achieved {achieved:,.0f} records/s"))
        commits = 1000 if quick else 10_000
        console.log(f"core: reopen a 64-partition topic after {commits:,} commits")
        elapsed, total = bench_reopen(work, commits)
        figures.append(Figure(SUITE, f"reopen 64-partition topic after {commits:,} commits", elapsed, "s",
                              "<= 2 s", elapsed <= 2, note=f"{total:,} records"))
        console.log(f"core: create a topic of {MAX_PARTITIONS:,} partitions")
        created_s = bench_largest_create(work)
        figures.append(Figure(SUITE, f"create a {MAX_PARTITIONS:,}-partition topic (local folder)", created_s, "s",
                              "<= 1 s", created_s <= 1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return figures
