"""Replication benchmarks: acks=all over three sites against acks=1 in the same run; catch-up MB/s."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa
from rich.console import Console

from benchmarks.common import Figure, percentile
from lakelog.platform import Broker
from lakelog.settings import Settings

SUITE = "replication"


def _batch(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    keys = [bytes(row) for row in rng.integers(97, 123, size=(n, 16), dtype=np.uint8)]
    return pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array([b"v" * 100] * n, pa.binary())})


def _produce(broker: Broker, topic: str, acks: str, calls: int, clients: int, batch: pa.Table) -> tuple[float, float]:
    latencies: list[float] = []
    lock = threading.Lock()

    def client() -> None:
        for _ in range(calls):
            start = time.perf_counter()
            broker.produce(topic, batch, acks=acks)
            with lock:
                latencies.append(time.perf_counter() - start)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    return calls * clients * batch.num_rows / elapsed, percentile(latencies, 99) * 1000


def run(console: Console, quick: bool = False) -> list[Figure]:
    work = tempfile.mkdtemp(prefix="lakelog-bench-repl-")
    sites = {name: os.path.join(work, name) for name in ("a", "b", "c")}
    settings = Settings(root=os.path.join(work, "unused"), sites=sites, linger_ms=5, replication_interval_ms=0)
    figures: list[Figure] = []
    calls = 10 if quick else 40
    batch = _batch(1000)
    try:
        with Broker(settings) as broker:
            config = {"replication.factor": 3, "min.insync.replicas": 2}
            broker.create_topic("acks1", 8, config, replicas=["a", "b", "c"])
            broker.create_topic("acksall", 8, config, replicas=["a", "b", "c"])
            console.log("replication: acks=1 vs acks=all, 3 local sites, 4 clients x 1,000-record calls")
            rate1, p99_1 = _produce(broker, "acks1", "1", calls, 4, batch)
            rate_all, p99_all = _produce(broker, "acksall", "all", calls, 4, batch)
            figures += [
                Figure(SUITE, "produce acks=1 (leader commit only)", rate1, "records/s"),
                Figure(SUITE, "produce acks=all, 3 sites, min.insync.replicas=2", rate_all, "records/s",
                       ratio=rate_all / rate1, note="ratio to acks=1"),
                Figure(SUITE, "produce p99 per call, acks=1", p99_1, "ms"),
                Figure(SUITE, "produce p99 per call, acks=all", p99_all, "ms", ratio=p99_all / p99_1,
                       note="ratio to acks=1"),
            ]
            console.log("replication: catch-up of followers after acks=1 writes")
            for _ in range(calls * 2):
                broker.produce("acks1", batch, acks="1")
            start = time.perf_counter()
            reports = broker.sync_replicas(["acks1"])
            elapsed = time.perf_counter() - start
            copied = sum(r.stats.bytes for r in reports)
            figures.append(Figure(SUITE, "replication catch-up (thread copier, local sites)", copied / 1e6 / elapsed,
                                  "MB/s", note=f"{copied / 1e6:,.1f} MB in {sum(r.versions for r in reports)} commits"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return figures
