"""Object-storage latency benchmarks (issue: object storage as the design point).

moto's S3 server in its own process, behind the delaying, counting proxy of tests/s3_latency.py, at two
presets: 15 ms one way (a 30 ms round trip, like S3 Standard) and 2 ms (4 ms, like S3 Express). Shape:
one small batch per produce call touching every partition (one record each), linger 5 ms, one call in
flight; 8 and 64 partitions. moto's own service time (a few ms a request on this machine) comes on top of
the modelled round trip, so the figures are a little pessimistic for a real store. The heap set up before
the measured calls is frozen, as the server freezes its own once ready (`server_heap`).
"""

from __future__ import annotations

import statistics
import threading
import time
from urllib.parse import quote

from rich.console import Console

from benchmarks.common import Figure, percentile, s3_behind_proxy, server_heap
from lakelog.platform import Broker, Record
from lakelog.platform.catalog.table import SNAPSHOT_DIR
from lakelog.platform.layout import CATALOG_TABLE, topic_path
from lakelog.platform.log import CHECKPOINT_INTERVAL
from lakelog.settings import Settings
from tests.conftest import S3Endpoint
from tests.s3_latency import KINDS, S3_EXPRESS, S3_STANDARD, Counted, DelayProxy, Request

SUITE = "s3"
BUCKET = "lakelog-bench"
PARTITION_COUNTS = (8, 64)
WARM_UP_COMMITS = 3
# No added delay first: the baseline of moto's service time and our CPU, under the modelled round trips.
PRESETS = {0.0: "no added delay", S3_STANDARD: "30 ms RTT", S3_EXPRESS: "4 ms RTT"}
# Targets from the issue, in ms (p50, p99) per preset; requests per commit; produce-to-poll p99.
PRODUCE_TARGETS: dict[float, tuple[float | None, float | None]] = {
    0.0: (None, None), S3_STANDARD: (100.0, 250.0), S3_EXPRESS: (None, 50.0)}
REQUESTS_TARGET = 3
POLL_P99_TARGET_MS = 400.0
CREATE_AT_TOPIC = 1000  # issue 26: topic create <= 100 ms at the 1,000th topic, 30 ms RTT
CREATE_TARGET_MS = 100.0
CREATES_MEASURED = 5


def _batch(partitions: int, i: int) -> list[Record]:
    return [Record(b"v" * 100, key=f"k{i}".encode(), partition=p) for p in range(partitions)]


def bench_produce(endpoint: S3Endpoint, proxy: DelayProxy, partitions: int, samples: int
                  ) -> tuple[list[float], list[Counted], list[int]]:
    """Latencies (s) of `samples` produce calls after a warm-up; the requests and table version of each."""
    with Broker(Settings(root=endpoint.root(), storage=endpoint.options, linger_ms=5)) as broker:
        broker.create_topic("bench", partitions)
        for i in range(WARM_UP_COMMITS):
            broker.produce("bench", _batch(partitions, i))
        latencies, counted, versions = [], [], []
        with server_heap():
            for i in range(samples):
                batch = _batch(partitions, i)
                with proxy.counter.measure() as requests:
                    start = time.perf_counter()
                    result = broker.produce("bench", batch)
                    latencies.append(time.perf_counter() - start)
                counted.append(requests)
                versions.append(result.version)
    return latencies, counted, versions


def bench_produce_to_poll(endpoint: S3Endpoint, samples: int) -> dict[str, list[float]]:
    """Seconds from a produce call to the record coming back from a long-polling fetch, for a consumer
    on the producing node (woken by the commit) and on another node (follows the log: a GET of the next
    commit file every refresh interval, then the new file in one GET)."""
    root = endpoint.root()
    options = endpoint.options
    seen: dict[str, list[float]] = {"same node": [], "other node": []}
    sent: dict[bytes, float] = {}
    with Broker(Settings(root=root, storage=options, linger_ms=5)) as producer, \
            Broker(Settings(root=root, storage=options, linger_ms=5)) as other:
        producer.create_topic("e2e", 8)
        producer.produce("e2e", [Record(b"warm", partition=0)])
        got = {name: threading.Event() for name in seen}
        stop = threading.Event()

        def consume(name: str, broker: Broker) -> None:
            offset = 0  # the warm-up record too: a steady consumer's node has its store client set up
            while not stop.is_set():
                result = broker.fetch("e2e", 0, offset, timeout_ms=1000)
                now = time.perf_counter()
                for record in result:
                    if record.value in sent:
                        seen[name].append(now - sent[record.value])
                    offset = record.offset + 1
                    got[name].set()

        threads = [threading.Thread(target=consume, args=(name, broker), daemon=True)
                   for name, broker in (("same node", producer), ("other node", other))]
        for thread in threads:
            thread.start()
        for event in got.values():  # both read the warm-up record, and long-poll for the next
            event.wait(10)
        time.sleep(0.5)
        with server_heap():
            for i in range(samples):
                for event in got.values():
                    event.clear()
                value = f"e2e-{i}".encode()
                sent[value] = time.perf_counter()
                producer.produce("e2e", [Record(value, partition=0)])
                for event in got.values():
                    event.wait(10)
        stop.set()
        for thread in threads:
            thread.join(5)
    return seen


def bench_topic_create(endpoint: S3Endpoint, proxy: DelayProxy, nth: int) -> tuple[list[float], list[Counted]]:
    """Seconds and requests of CREATES_MEASURED topic creates (8 partitions) at a 30 ms round trip, the first
    of them the `nth` topic of the catalog (the topics before it created with no added delay)."""
    proxy.delay = 0.0
    with Broker(Settings(root=endpoint.root(), storage=endpoint.options)) as broker:
        for i in range(nth - 1):
            broker.create_topic(f"seed-{i:05d}", 1)
        time.sleep(1)  # the catalog's snapshot of a multiple of 50 versions is written in the background
        proxy.delay = S3_STANDARD
        latencies, counted = [], []
        for i in range(CREATES_MEASURED):
            with proxy.counter.measure() as requests:
                start = time.perf_counter()
                broker.create_topic(f"measured-{i}", 8)
                latencies.append(time.perf_counter() - start)
            counted.append(Counted([r for r in requests.requests if _of_create(r, f"measured-{i}")]))
    return latencies, counted


def _of_create(request: Request, topic: str) -> bool:
    """A request of the create of `topic`: of its table, or a write of the catalog's commit. Not the reads
    and writes of the catalog's snapshot and Delta checkpoint, made in the background every 50 versions (the
    1,000th is one); the create itself reads nothing."""
    if f"/{topic_path(topic)}/" in request.target or quote(f"/{topic_path(topic)}/", safe="") in request.target:
        return True  # its version 0 and checkpoint; the listing of its log (the prefix in the query)
    return f"/{CATALOG_TABLE}/" in request.target and request.kind in ("put_data", "put_log") \
        and f"/{SNAPSHOT_DIR}/" not in request.target and "checkpoint" not in request.target


def _create_figures(nth: int, latencies: list[float], counted: list[Counted]) -> list[Figure]:
    first = latencies[0] * 1000
    requests = statistics.median(c.total for c in counted)
    spelled = ", ".join(f"{kind} {n:g}" for kind in KINDS
                        if (n := statistics.median(c.counts[kind] for c in counted)))
    return [
        Figure(SUITE, f"topic create at the {nth:,}th topic, 30 ms RTT", first, "ms",
               f"<= {CREATE_TARGET_MS:.0f} ms", first <= CREATE_TARGET_MS,
               note=f"median of {len(latencies)} creates from there: {_ms(latencies, 50):.0f} ms"),
        Figure(SUITE, f"object requests per topic create, {nth:,} topics", requests, "requests",
               "<= 3 round trips", note=f"median of {len(counted)}: {spelled}; two round trips: the table's version 0, "
                                        "its log's listing and the catalog row's file, then the catalog commit "
                                        "and the table's checkpoint"),
    ]


def _ms(samples: list[float], q: float) -> float:
    return percentile(samples, q) * 1000


def _produce_figures(preset: float, partitions: int, latencies: list[float]) -> list[Figure]:
    p50_target, p99_target = PRODUCE_TARGETS[preset]
    p50, p99 = _ms(latencies, 50), _ms(latencies, 99)
    label = f"produce latency, {partitions} partitions, {PRESETS[preset]}, linger 5 ms"
    return [
        Figure(SUITE, f"{label}: p50", p50, "ms", "" if p50_target is None else f"<= {p50_target:.0f} ms",
               None if p50_target is None else p50 <= p50_target, note=f"{len(latencies)} calls"),
        Figure(SUITE, f"{label}: p99", p99, "ms", "" if p99_target is None else f"<= {p99_target:.0f} ms",
               None if p99_target is None else p99 <= p99_target, note=f"{len(latencies)} calls"),
    ]


def _request_figures(partitions: int, counted: list[Counted], versions: list[int]) -> list[Figure]:
    """Requests of a steady-state commit (median per kind over commits without a checkpoint), and the
    mean over all commits measured (checkpoints included)."""
    steady = [c for c, v in zip(counted, versions) if v % CHECKPOINT_INTERVAL != 0] or counted
    total = statistics.median(c.total for c in steady)
    by_kind = {kind: statistics.median(c.counts[kind] for c in steady) for kind in KINDS}
    spelled = ", ".join(f"{kind} {n:g}" for kind, n in by_kind.items() if n)
    mean = statistics.mean(c.total for c in counted)
    return [
        Figure(SUITE, f"object requests per commit, {partitions} partitions (steady state)", total, "requests",
               f"<= {REQUESTS_TARGET}, any partition count", total <= REQUESTS_TARGET, note=spelled),
        Figure(SUITE, f"object requests per commit, {partitions} partitions (mean, checkpoints included)", mean,
               "requests", note=f"{len(counted)} commits"),
    ]


def run(console: Console, quick: bool = False) -> list[Figure]:
    figures: list[Figure] = []
    samples = {8: 10, 64: 6} if quick else {8: 60, 64: 60}  # at 30 ms RTT, 60 calls are about 6 s
    with s3_behind_proxy(BUCKET) as proxy:
        endpoint = S3Endpoint(proxy.port, BUCKET)
        for preset in PRESETS:
            proxy.delay = preset
            for partitions in PARTITION_COUNTS:
                console.log(f"s3: produce, {partitions} partitions, {PRESETS[preset]}")
                latencies, counted, versions = bench_produce(endpoint, proxy, partitions, samples[partitions])
                figures += _produce_figures(preset, partitions, latencies)
                if preset == S3_STANDARD:  # the counts do not depend on the delay
                    figures += _request_figures(partitions, counted, versions)
        for nth in (1, 100 if quick else CREATE_AT_TOPIC):
            console.log(f"s3: topic create at the {nth:,}th topic, 30 ms RTT")
            figures += _create_figures(nth, *bench_topic_create(endpoint, proxy, nth))
        proxy.delay = S3_STANDARD
        console.log("s3: produce to long-poll fetch, 30 ms RTT")
        seen = bench_produce_to_poll(endpoint, 10 if quick else 30)
        for name, latencies in seen.items():
            p99 = _ms(latencies, 99)
            figures += [
                Figure(SUITE, f"produce-to-poll, consumer on the {name}, 30 ms RTT: p50", _ms(latencies, 50),
                       "ms", note=f"{len(latencies)} records"),
                Figure(SUITE, f"produce-to-poll, consumer on the {name}, 30 ms RTT: p99", p99, "ms",
                       f"<= {POLL_P99_TARGET_MS:.0f} ms", p99 <= POLL_P99_TARGET_MS,
                       note=f"{len(latencies)} records"),
            ]
    return figures
