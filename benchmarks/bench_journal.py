"""The node journal against a commit per topic (issue 26): object requests and produce latency at 1, 30
and 300 topics, and what idle topics cost, journal on and off side by side in one run; and 1,000 topics
with the journal on (off, every call is its own commit already at 300).

moto's S3 server behind the delaying, counting proxy (tests/s3_latency.py) at a 30 ms round trip. The
topics are created once (one root, no added delay: topic admin is measured in bench_s3); each measured
point is its own broker, which opens its topics (a first produce each) and commits them with no delay
either, then takes 100 produce calls a second of one 100-byte record each, round-robin over the topics,
issued on their own threads so a slow call does not hold back the next. With the journal on,
`table.commit.interval.ms` is 5 s (the default is 10 s), so the window holds table commits too,
paced to the node's default `journal_table_commit_rate` (5 a second) past 25 topics. Every
object request is counted over the measured window, which ends once every call is acknowledged (journal
on: durable in the journal; off: committed): PUTs (journal objects, data files, commit files,
checkpoints, epoch claims) and the others (GET, HEAD, LIST, DELETE). Idle: before the 300-topic load,
10 s with the topics opened and committed and no call. Each PUT/s figure's note says how many calls were
acknowledged a second (below 100 when the node did not keep up: PUT/s is then what it managed, and PUTs
per call scale it to the offered rate) and, journal on, the journal's PUTs and the table commits a second.
The journal-off points run first, so each journal-on broker meets tables the previous brokers left committed.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

from rich.console import Console

from benchmarks.common import Figure, percentile, s3_behind_proxy
from lakelog.platform import Broker, Record
from lakelog.settings import Settings
from tests.conftest import S3Endpoint
from tests.s3_latency import KINDS, S3_STANDARD, DelayProxy

SUITE = "journal"
BUCKET = "lakelog-bench-journal"
TOPIC_COUNTS = (1, 30, 300)
JOURNAL_ONLY_COUNTS = (1000,)  # journal on only: off, every call is its own commit from 300 topics on
RATE = 100.0  # produce calls a second
COMMIT_INTERVAL_MS = 5_000
WARMUP_S = 2.0
IDLE_S = 10.0
PUT_TARGET = 25.0  # PUT/s at 100 calls/s over 30 and over 300 topics (issue 26)
P50_TARGET, P99_TARGET = 100.0, 250.0  # produce latency (ms) at 1, 30 and 300 topics (issue 26)
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
    journal: bool
    window: Window
    p50: float
    p99: float
    calls: int  # acknowledged in the window (offered: RATE a second)
    table_commits: int  # journal on: table commits behind the journal in the window


def counted(proxy: DelayProxy, since: int, seconds: float) -> Window:
    requests = proxy.counter.requests(since=since)
    counts = {kind: 0 for kind in KINDS}
    for r in requests:
        counts[r.kind] += 1
    journal_puts = sum(1 for r in requests if r.kind.startswith("put") and "/_journal/" in r.target)
    return Window(counts, journal_puts, seconds)


def names_of(topics: int) -> list[str]:
    return [f"bench-{n}" for n in range(topics)]


def settings_of(root: str, endpoint: S3Endpoint, journal: bool) -> Settings:
    return Settings(root=root, storage=endpoint.options, linger_ms=5, journal_enable=journal)


def create_topics(root: str, endpoint: S3Endpoint, names: list[str]) -> None:
    with Broker(settings_of(root, endpoint, journal=False)) as broker:
        for name in names:
            broker.create_topic(name, 1, {"table.commit.interval.ms": COMMIT_INTERVAL_MS})


def open_topics(broker: Broker, names: list[str]) -> None:
    """A first produce to each topic, then everything committed: no table commit of the opening is left
    for the measured window."""
    for name in names:
        broker.produce(name, [Record(b"warm")])
    broker.flush()


def load(broker: Broker, names: list[str], duration: float, latencies: list[float] | None) -> None:
    """`RATE` calls a second for `duration` s, round-robin over `names`; each call's latency (s) appended."""
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
        future = broker.produce_async(names[i % len(names)], [Record(b"v" * 100, key=b"k%d" % i)])
        if latencies is not None:
            future.add_done_callback(record_latency(time.perf_counter()))
        i += 1


def bench_point(root: str, endpoint: S3Endpoint, proxy: DelayProxy, journal: bool, topics: int,
                seconds: float, idle_s: float = 0.0) -> tuple[Point, Window | None]:
    """Object requests and produce latency (ms) over `seconds` of load after a warm-up of `WARMUP_S`; with
    `idle_s`, first the object requests over that long with the topics opened and committed, and no call."""
    proxy.delay = 0.0
    names = names_of(topics)
    with Broker(settings_of(root, endpoint, journal)) as broker:
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
        commits = broker.journal.committer.commits if journal else 0  # type: ignore[union-attr]
        started = time.perf_counter()
        load(broker, names, seconds, latencies)
        broker.flush() if not journal else broker.journal.writer.drain()  # type: ignore[union-attr]
        window = counted(proxy, since, time.perf_counter() - started)
        commits = broker.journal.committer.commits - commits if journal else 0  # type: ignore[union-attr]
        proxy.delay = 0.0
    point = Point(topics, journal, window, percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000,
                  len(latencies), commits)
    return point, idle


def point_figures(on: Point, off: Point | None) -> list[Figure]:
    """One topic count, journal off (when measured) then on; ratios are on / off."""
    figures: list[Figure] = []
    put_target = on.topics >= 30
    for p in [p for p in (off, on) if p is not None]:
        where = f"{p.topics} topic{'s' if p.topics > 1 else ''}, {RATE:.0f} calls/s, 30 ms RTT, " \
                f"journal {'on' if p.journal else 'off'}"
        judged = p.journal
        base = off if judged else None  # what the on figures are compared with

        def ratio(value: float, of: Callable[[Point], float]) -> float | None:
            return value / of(base) if base is not None and of(base) else None

        w = p.window
        figures += [
            Figure(SUITE, f"PUT/s, {where}", w.put_s, "PUT/s",
                   f"<= {PUT_TARGET:.0f}" if judged and put_target else "",
                   w.put_s <= PUT_TARGET if judged and put_target else None,
                   ratio=ratio(w.put_s, lambda b: b.window.put_s),
                   note=f"{p.calls} calls acknowledged over {w.seconds:.1f} s, {p.calls / w.seconds:.0f}/s; "
                        + (f"journal PUTs {w.journal_put_s:.1f}/s, table commits {p.table_commits / w.seconds:.1f}/s"
                           if p.journal else f"{w.put_s * w.seconds / max(p.calls, 1):.2f} PUTs per call")),
            Figure(SUITE, f"other object requests/s, {where}", w.other_s, "req/s",
                   ratio=ratio(w.other_s, lambda b: b.window.other_s), note=w.other_note()),
            Figure(SUITE, f"produce p50, {where}", p.p50, "ms", f"<= {P50_TARGET:.0f} ms" if judged else "",
                   p.p50 <= P50_TARGET if judged else None, ratio=ratio(p.p50, lambda b: b.p50)),
            Figure(SUITE, f"produce p99, {where}", p.p99, "ms", f"<= {P99_TARGET:.0f} ms" if judged else "",
                   p.p99 <= P99_TARGET if judged else None, ratio=ratio(p.p99, lambda b: b.p99)),
        ]
    return figures


def idle_figures(on: Window, off: Window, topics: int) -> list[Figure]:
    return [
        Figure(SUITE, f"object requests/s, {topics} idle topics, journal off", off.total_s, "req/s",
               note=f"over {off.seconds:.0f} s; PUT {off.put_s:.1f}/s"
                    + (f", {off.other_note()}" if off.other_s else "")),
        Figure(SUITE, f"object requests/s, {topics} idle topics, journal on", on.total_s, "req/s", "0 (cost nothing)",
               on.total_s == 0,
               note=f"over {on.seconds:.0f} s; PUT {on.put_s:.1f}/s" + (f", {on.other_note()}" if on.other_s else "")),
    ]


def windows(quick: bool) -> dict[tuple[bool, int], float]:
    """Seconds measured per point: shorter for the 300-topic journal-off point (every call its own
    commit, the slowest and least interesting)."""
    full = 6.0 if quick else 15.0
    return {(journal, topics): (full / 2 if not journal and topics == max(TOPIC_COUNTS) else full)
            for journal in (False, True) for topics in TOPIC_COUNTS}


def run(console: Console, quick: bool = False) -> list[Figure]:
    seconds = windows(quick)
    figures: list[Figure] = []
    with s3_behind_proxy(BUCKET) as proxy:
        endpoint = S3Endpoint(proxy.port, BUCKET)
        root = endpoint.root()
        most = max(TOPIC_COUNTS)
        console.log(f"journal: creating {most} topics")
        create_topics(root, endpoint, names_of(most))
        points: dict[tuple[bool, int], Point] = {}
        idle: dict[bool, Window] = {}
        for journal in (False, True):
            label = "journal on" if journal else "journal off"
            for topics in TOPIC_COUNTS:
                console.log(f"journal: {topics} topics, {RATE:.0f} calls/s, 30 ms RTT, {label}"
                            + (f", after {IDLE_S:.0f} s idle" if topics == most else ""))
                points[journal, topics], window = bench_point(
                    root, endpoint, proxy, journal, topics, seconds[journal, topics],
                    IDLE_S if topics == most else 0.0)
                if window is not None:
                    idle[journal] = window
        for topics in () if quick else JOURNAL_ONLY_COUNTS:
            console.log(f"journal: creating {topics - most} more topics; {topics} topics, journal on")
            create_topics(root, endpoint, names_of(topics)[most:])
            points[True, topics], _ = bench_point(root, endpoint, proxy, True, topics, seconds[True, most])
        for topics in TOPIC_COUNTS:
            figures += point_figures(points[True, topics], points[False, topics])
        figures += idle_figures(idle[True], idle[False], most)
        for topics in () if quick else JOURNAL_ONLY_COUNTS:
            figures += point_figures(points[True, topics], None)
    return figures


if __name__ == "__main__":  # one run of this suite alone, printed (RESULTS.md is left alone)
    for figure in run(Console(stderr=True)):
        print(f"{figure.name}: {figure.value:.1f} {figure.unit} (target {figure.target or '-'}, met {figure.met}, "
              f"ratio {figure.ratio}) {figure.note}")
