"""The node journal, lakelog's one write path, at its default settings (issue 41): object requests, produce
latency and table freshness at 1, 30, 300 and 1,000 topics, and what idle topics cost.

moto's S3 server behind the delaying, counting proxy (tests/s3_latency.py) at a 30 ms round trip. Nothing is
tuned: the node's defaults (`linger_ms` 0, the journal flush a group commit; `journal_table_commit_rate` 15
table commits a second) and the topics' (`table.commit.interval.ms` 1 s), because those are what a deployment
gets. The topics (one partition each) are created through a broker with no added delay (topic admin is
measured in bench_s3), before the first point that needs them; each measured point is its own broker, which
opens its topics (a first produce each, committed) with no delay either, then takes 100 produce calls a
second of one 100-byte record each, round-robin over the topics, each answered at the journal's
acknowledgement (`produce_async`) and issued on its own so a slow call does not hold back the next. After a
2 s warm-up, every object request through the proxy is counted over the measured window, which ends once
every call is acknowledged: PUTs (journal objects, data files, commit files, checkpoints, epoch claims; the
target, <= 25 a second at every topic count, is issue 41's) and the others (GET, HEAD, LIST, DELETE). Each
PUT/s figure's note says how many calls were acknowledged a second (below 100 when the node did not keep up:
PUT/s is then what it managed), the journal's PUTs and the table commits a second. Produce latency (p50
<= 100 ms, p99 <= 250 ms at every topic count) is from the call to its acknowledgement.

Table freshness: one call a second in the window is a marker, sent to a topic picked across all of them
rather than round-robin (so the markers sample many tables), and its acknowledgement time is noted. A Delta
reader in another process (benchmarks/journal_freshness.py: `deltalake.DeltaTable`, talking to moto
directly so its requests are not counted as the broker's) polls each marked table by version and log end
until the record is in it; freshness is acknowledgement to visible, judged by its maximum (<= 2 s at 1 and 30
topics, <= 60 s at 300; at 1,000 reported only: at 15 table commits a second a round of 1,000 topics takes
67 s). The broker keeps running after the window until every marker is visible or a cap passes (a marker
never seen counts at its age then). Idle: before the 300-topic load, 10 s with the topics opened and
committed and no call. `quick` (a smoke run): 6 s windows, no 1,000-topic point, a shorter freshness cap.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

from rich.console import Console

from benchmarks.common import Figure, percentile, s3_behind_proxy
from benchmarks.journal_freshness import Freshness, FreshnessReader
from lakelog.platform import Broker, Record
from lakelog.platform.layout import topic_path
from lakelog.platform.storage import Storage
from lakelog.settings import Settings
from tests.conftest import S3Endpoint
from tests.s3_latency import KINDS, S3_STANDARD, DelayProxy

SUITE = "journal"
BUCKET = "lakelog-bench-journal"
TOPIC_COUNTS = (1, 30, 300, 1000)
QUICK_TOPIC_COUNTS = (1, 30, 300)  # quick: creating and opening 700 more topics would take most of the run
IDLE_TOPICS = 300
RATE = 100.0  # produce calls a second
MARKERS_PER_S = 1.0  # of those, marker records whose table freshness is measured
WARMUP_S = 2.0
IDLE_S = 10.0
WINDOW_S, QUICK_WINDOW_S = 15.0, 6.0
FRESHNESS_CAP_S, QUICK_FRESHNESS_CAP_S = 150.0, 45.0  # how long after the window markers are waited for
PUT_TARGET = 25.0  # PUT/s at 100 calls/s, at every topic count (issue 41)
P50_TARGET, P99_TARGET = 100.0, 250.0  # produce latency (ms), at every topic count (issue 41)
FRESHNESS_TARGETS = {1: 2.0, 30: 2.0, 300: 60.0}  # seconds, the maximum; none at 1,000 (issue 41)
OTHER_KINDS = ("get", "head", "list", "delete", "other")


@dataclass
class Window:
    """The object requests of one measured window, by kind."""

    counts: dict[str, int]
    journal_puts: int  # PUTs of keys under _journal/ (journal objects, epoch claims, the start probe)
    seconds: float

    @property
    def put_s(self) -> float:
        return (self.counts["put_data"] + self.counts["put_log"]) / self.seconds

    @property
    def journal_put_s(self) -> float:
        return self.journal_puts / self.seconds

    @property
    def other_s(self) -> float:
        return sum(self.counts[k] for k in OTHER_KINDS) / self.seconds

    @property
    def total_s(self) -> float:
        return sum(self.counts.values()) / self.seconds

    def other_note(self) -> str:
        return ", ".join(f"{k} {self.counts[k] / self.seconds:.1f}/s" for k in OTHER_KINDS if self.counts[k])


@dataclass
class Point:
    topics: int
    window: Window
    p50: float
    p99: float
    calls: int  # acknowledged in the window (offered: RATE a second)
    table_commits: int  # table commits behind the journal in the window
    freshness: Freshness
    reader_s: float  # how long the freshness reader ran (window and wait after it)


def counted(proxy: DelayProxy, since: int, seconds: float) -> Window:
    requests = proxy.counter.requests(since=since)
    counts = {kind: 0 for kind in KINDS}
    for r in requests:
        counts[r.kind] += 1
    journal_puts = sum(1 for r in requests if r.kind.startswith("put") and "/_journal/" in r.target)
    return Window(counts, journal_puts, seconds)


def names_of(topics: int) -> list[str]:
    return [f"bench-{n}" for n in range(topics)]


def settings_of(root: str, endpoint: S3Endpoint) -> Settings:
    return Settings(root=root, storage=endpoint.options)  # the defaults: what is measured


def create_topics(root: str, endpoint: S3Endpoint, names: list[str]) -> None:
    with Broker(settings_of(root, endpoint)) as broker:
        for name in names:
            broker.create_topic(name, 1)


def open_topics(broker: Broker, names: list[str]) -> None:
    """A first produce to each topic (committed to its table before it returns), then everything
    committed: no table commit of the opening is left for the measured window."""
    for name in names:
        broker.produce(name, [Record(b"warm")])
    broker.flush()


class Markers:
    """Picks the calls that are markers and tells the freshness reader when each is acknowledged."""

    def __init__(self, reader: FreshnessReader, uris: dict[str, str], names: list[str]) -> None:
        self.reader, self.uris, self.names = reader, uris, names
        self.every = max(1, round(RATE / MARKERS_PER_S))
        self._pick = random.Random(41)

    def topic_of(self, i: int) -> str | None:
        """The topic of call `i` if it is a marker (spread over the topics, unlike the round-robin)."""
        return self._pick.choice(self.names) if i % self.every == 0 else None

    def acknowledged(self, topic: str) -> Callable[[Future], None]:
        def done(future: Future) -> None:
            acked = time.monotonic()
            result = future.result()
            self.reader.mark(self.uris[topic], int(result.partitions[0]), int(result.offsets[0]), acked)
        return done


def load(broker: Broker, names: list[str], duration: float, latencies: list[float] | None,
         markers: Markers | None = None) -> None:
    """`RATE` calls a second for `duration` s, round-robin over `names` (markers excepted); each call's
    latency (s) appended."""
    lock = threading.Lock()

    def record_latency(started: float) -> Callable[[Future], None]:
        def done(future: Future) -> None:
            future.result()
            with lock:
                latencies.append(time.perf_counter() - started)  # type: ignore[union-attr]
        return done

    start = time.perf_counter()
    i = 0
    while (now := time.perf_counter()) - start < duration:
        time.sleep(max(0.0, start + i / RATE - now))
        marker = markers.topic_of(i) if markers is not None else None
        topic = marker or names[i % len(names)]
        future = broker.produce_async(topic, [Record(b"v" * 100, key=b"k%d" % i)])
        if latencies is not None:
            future.add_done_callback(record_latency(time.perf_counter()))
        if marker is not None:
            future.add_done_callback(markers.acknowledged(marker))  # type: ignore[union-attr]
        i += 1


def bench_point(root: str, endpoint: S3Endpoint, direct: S3Endpoint, proxy: DelayProxy, topics: int,
                seconds: float, freshness_cap: float, idle_s: float = 0.0) -> tuple[Point, Window | None]:
    """Object requests and produce latency (ms) over `seconds` of load after a warm-up of `WARMUP_S`, table
    freshness of the window's markers (waited for up to `freshness_cap` s after it); with `idle_s`, first
    the object requests over that long with the topics opened and committed, and no call."""
    proxy.delay = 0.0
    names = names_of(topics)
    store = Storage.open(root, direct.options)  # the reader's view: moto itself, not the counting proxy
    uris = {name: store.uri(topic_path(name)) for name in names}
    with FreshnessReader(store.delta_options()) as reader, Broker(settings_of(root, endpoint)) as broker:
        open_topics(broker, names)
        proxy.delay = S3_STANDARD
        idle = None
        if idle_s:
            since, started = proxy.counter.position(), time.perf_counter()
            time.sleep(idle_s)
            idle = counted(proxy, since, time.perf_counter() - started)
        latencies: list[float] = []
        load(broker, names, WARMUP_S, None)
        since = proxy.counter.position()
        commits = broker.journal.committer.commits
        started = time.perf_counter()
        load(broker, names, seconds, latencies, Markers(reader, uris, names))
        broker.journal.writer.drain()
        window = counted(proxy, since, time.perf_counter() - started)
        commits = broker.journal.committer.commits - commits
        freshness = reader.finish(freshness_cap)  # the broker goes on committing meanwhile, at 30 ms RTT
        reader_s = time.perf_counter() - started
        proxy.delay = 0.0
    point = Point(topics, window, percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000,
                  len(latencies), commits, freshness, reader_s)
    return point, idle


def point_figures(p: Point) -> list[Figure]:
    where = f"{p.topics:,} topic{'s' if p.topics > 1 else ''}, {RATE:.0f} calls/s, 30 ms RTT"
    w = p.window
    fresh = p.freshness
    target = FRESHNESS_TARGETS.get(p.topics)
    return [
        Figure(SUITE, f"PUT/s, {where}", w.put_s, "PUT/s", f"<= {PUT_TARGET:.0f}", w.put_s <= PUT_TARGET,
               note=f"{p.calls} calls acknowledged over {w.seconds:.1f} s, {p.calls / w.seconds:.0f}/s; "
                    f"journal PUTs {w.journal_put_s:.1f}/s, table commits {p.table_commits / w.seconds:.1f}/s"),
        Figure(SUITE, f"other object requests/s, {where}", w.other_s, "req/s", note=w.other_note()),
        Figure(SUITE, f"produce p50, {where}", p.p50, "ms", f"<= {P50_TARGET:.0f} ms", p.p50 <= P50_TARGET),
        Figure(SUITE, f"produce p99, {where}", p.p99, "ms", f"<= {P99_TARGET:.0f} ms", p.p99 <= P99_TARGET),
        Figure(SUITE, f"table freshness p50, {where}", fresh.p50, "s", note=fresh.note(p.reader_s)),
        Figure(SUITE, f"table freshness max, {where}", fresh.max, "s",
               f"<= {target:.0f} s" if target is not None else "",
               (fresh.max <= target and not fresh.unseen and fresh.markers > 0) if target is not None else None,
               note="acknowledgement to visible in the table, for a Delta reader in another process"),
    ]


def idle_figures(idle: Window, topics: int) -> list[Figure]:
    return [Figure(SUITE, f"object requests/s, {topics} idle topics", idle.total_s, "req/s", "0 (cost nothing)",
                   idle.total_s == 0,
                   note=f"over {idle.seconds:.0f} s; PUT {idle.put_s:.1f}/s"
                        + (f", {idle.other_note()}" if idle.other_s else ""))]


def run(console: Console, quick: bool = False) -> list[Figure]:
    counts = QUICK_TOPIC_COUNTS if quick else TOPIC_COUNTS
    seconds = QUICK_WINDOW_S if quick else WINDOW_S
    cap = QUICK_FRESHNESS_CAP_S if quick else FRESHNESS_CAP_S
    figures: list[Figure] = []
    with s3_behind_proxy(BUCKET) as proxy:
        endpoint = S3Endpoint(proxy.port, BUCKET)
        direct = S3Endpoint(proxy.upstream_port, BUCKET)  # moto itself: the freshness reader's requests
        root = endpoint.root()
        created = 0
        idle: Window | None = None
        for topics in counts:
            if topics > created:
                console.log(f"journal: creating {topics - created} topic{'s' if topics - created > 1 else ''}")
                create_topics(root, endpoint, names_of(topics)[created:])
                created = topics
            console.log(f"journal: {topics} topic{'s' if topics > 1 else ''}, {RATE:.0f} calls/s, 30 ms RTT, defaults"
                        + (f", after {IDLE_S:.0f} s idle" if topics == IDLE_TOPICS else ""))
            point, window = bench_point(root, endpoint, direct, proxy, topics, seconds, cap,
                                        IDLE_S if topics == IDLE_TOPICS else 0.0)
            figures += point_figures(point)
            if window is not None:
                idle = window
        if idle is not None:
            figures += idle_figures(idle, IDLE_TOPICS)
    return figures


if __name__ == "__main__":  # one run of this suite alone, printed (RESULTS.md is left alone)
    import sys

    for figure in run(Console(stderr=True), quick="--quick" in sys.argv[1:]):
        print(f"{figure.name}: {figure.value:.2f} {figure.unit} (target {figure.target or '-'}, met {figure.met}) "
              f"{figure.note}")
