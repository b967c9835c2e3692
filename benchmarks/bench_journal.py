"""The node journal against a commit per topic (issue 26): PUT/s and produce latency at 30 topics.

moto's S3 server behind the delaying, counting proxy (tests/s3_latency.py) at a 30 ms round trip. The
topics are created and opened with no added delay (topic admin is measured in bench_s3), then 100 produce calls a
second of one 100-byte record each, round-robin over the topics, issued on their own threads so a slow
call does not hold back the next. With the journal on, `table.commit.interval.ms` is 5 s, so the window
holds table commits too. PUT/s counts every PUT (journal objects, data files, commit files, checkpoints)
over the measured window.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Callable

import boto3
from rich.console import Console

from benchmarks.common import Figure, percentile
from lakelog.platform import Broker, Record
from lakelog.settings import Settings
from tests.conftest import S3Endpoint, free_port, start_moto
from tests.s3_latency import S3_STANDARD, DelayProxy

SUITE = "journal"
BUCKET = "lakelog-bench-journal"
TOPICS = 30
RATE = 100.0  # produce calls a second
COMMIT_INTERVAL_MS = 5_000
PUT_TARGET = 25.0  # PUT/s at 100 calls/s over 30 topics (issue 26)


def bench_many_topics(endpoint: S3Endpoint, proxy: DelayProxy, journal: bool, seconds: float,
                      topics: int = TOPICS) -> dict[str, float]:
    """PUT/s and produce latency (ms) of `seconds` of load after a warm-up of 2 s."""
    proxy.delay = 0.0
    settings = Settings(root=endpoint.root(), storage=endpoint.options, linger_ms=5, journal_enable=journal)
    with Broker(settings) as broker:
        names = [f"bench-{n}" for n in range(topics)]
        for name in names:  # created and opened (a first produce) before the delay: admin is not measured
            broker.create_topic(name, 1, {"table.commit.interval.ms": COMMIT_INTERVAL_MS})
            broker.produce(name, [Record(b"warm")])
        proxy.delay = S3_STANDARD
        latencies: list[float] = []
        lock = threading.Lock()

        def record_latency(started: float) -> Callable[[Future], None]:
            def done(future: Future) -> None:
                future.result()
                with lock:
                    latencies.append(time.perf_counter() - started)
            return done

        def load(duration: float, measured: bool) -> None:
            start = time.perf_counter()
            i = 0
            while (now := time.perf_counter()) - start < duration:
                time.sleep(max(0.0, start + i / RATE - now))
                future = broker.produce_async(names[i % topics], [Record(b"v" * 100, key=b"k%d" % i)])
                if measured:
                    future.add_done_callback(record_latency(time.perf_counter()))
                i += 1

        load(2.0, measured=False)
        before = proxy.counter.snapshot()
        started = time.perf_counter()
        load(seconds, measured=True)
        broker.flush() if not journal else broker.journal.writer.drain()  # type: ignore[union-attr]
        elapsed = time.perf_counter() - started
        after = proxy.counter.snapshot()
        proxy.delay = 0.0
    puts = (after["put_data"] + after["put_log"]) - (before["put_data"] + before["put_log"])
    return {"put_s": puts / elapsed, "p50": percentile(latencies, 50) * 1000, "p99": percentile(latencies, 99) * 1000,
            "calls": len(latencies)}


def run(console: Console, quick: bool = False) -> list[Figure]:
    seconds = 6.0 if quick else 15.0
    port = free_port()
    moto = start_moto(port)
    figures: list[Figure] = []
    try:
        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                     aws_access_key_id="test", aws_secret_access_key="test").create_bucket(Bucket=BUCKET)
        with DelayProxy(port) as proxy:
            endpoint = S3Endpoint(proxy.port, BUCKET)
            results = {}
            for journal in (False, True):
                label = "journal on" if journal else "journal off"
                console.log(f"journal: {TOPICS} topics, {RATE:.0f} calls/s, 30 ms RTT, {label}")
                results[label] = bench_many_topics(endpoint, proxy, journal, seconds)
            for label, r in results.items():
                on = label == "journal on"
                where = f"{TOPICS} topics, {RATE:.0f} calls/s, 30 ms RTT, {label}"
                figures += [
                    Figure(SUITE, f"PUT/s, {where}", r["put_s"], "PUT/s", f"<= {PUT_TARGET:.0f}" if on else "",
                           r["put_s"] <= PUT_TARGET if on else None, note=f"{r['calls']:.0f} calls"),
                    Figure(SUITE, f"produce p50, {where}", r["p50"], "ms", "<= 100 ms" if on else "",
                           r["p50"] <= 100 if on else None),
                    Figure(SUITE, f"produce p99, {where}", r["p99"], "ms", "<= 250 ms" if on else "",
                           r["p99"] <= 250 if on else None),
                ]
    finally:
        moto.stdin.close()  # type: ignore[union-attr]
        moto.kill()
        moto.wait()
    return figures


if __name__ == "__main__":  # one run of this suite alone, printed (RESULTS.md is left alone)
    for figure in run(Console(stderr=True)):
        print(f"{figure.name}: {figure.value:.1f} {figure.unit} (target {figure.target or '-'}, met {figure.met})")
