"""Consumer groups (issue 42): how long a rebalance takes when a 4th member joins a group of 3, with
confluent-kafka's KIP-848 consumer (`group.protocol=consumer`) and, for comparison in the same run, its classic
consumer (`group.protocol=classic`, `cooperative-sticky`).

Target (KIP-848): every partition assigned again within 2 heartbeat intervals, at the defaults a user gets:
the server's `group.consumer.heartbeat.interval.ms` (lakelog/settings.py, 5,000 ms), which the coordinator
hands its members. The classic group runs at librdkafka's defaults (heartbeat.interval.ms 3,000 ms,
session.timeout.ms 45,000 ms) and the server's `group.initial.rebalance.delay.ms` (it delays only a new group's
first assignment, not the rebalance measured); it has no target here.

Method, for each protocol and each run (a fresh group each time): one `lakelog serve --no-jobs` process at
the defaults (no `LAKELOG_*` variable passed on) with a topic of 12 partitions and 1,200 records; 3 consumers
subscribe, each polled in its own thread (poll(0.05), then `assignment()`), until each partition is owned by
exactly one of them, every one owning some, and that has held for one heartbeat interval. A 4th consumer is
then created and subscribed in its own thread, and the time is taken from its creation (its first poll follows
at once) until the 4 members' assignments cover every partition exactly once with the 4th owning some (as
each thread saw after a poll: up to 50 ms late). A run that has not got there in 60 s counts as 60 s, not met.
Median and max over the runs, in seconds and in heartbeat intervals. The consumers and the server share this
machine's cores.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console

from benchmarks.common import Figure, free_port, wait_ready
from lakelog.settings import GroupSettings

SUITE = "groups"
REPO = Path(__file__).resolve().parents[1]
TOPIC = "groups"
PARTITIONS = 12
RECORDS = 1_200
RUNS = 5
TARGET_INTERVALS = 2.0
CAP_S = 60.0  # a join not settled by then counts as this long
SETUP_CAP_S = 180.0
POLL_S = 0.05
CONSUMER_INTERVAL_MS = GroupSettings().group_consumer_heartbeat_interval_ms  # the server's default
CLASSIC_INTERVAL_MS = 3_000  # librdkafka's heartbeat.interval.ms default
PROTOCOLS = {
    "consumer": ({"group.protocol": "consumer"}, CONSUMER_INTERVAL_MS),
    "classic": ({"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"},
                CLASSIC_INTERVAL_MS),
}


class Server:
    """`lakelog serve --no-jobs` at the defaults, its Kafka listener on a free port."""

    def __init__(self, root: str) -> None:
        self.port, self.kafka_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.bootstrap = f"127.0.0.1:{self.kafka_port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")}  # nothing overridden
        self.proc = subprocess.Popen([sys.executable, "-m", "lakelog.cli", "--root", root, "serve", "--host",
                                      "127.0.0.1", "--port", str(self.port), "--kafka-port", str(self.kafka_port),
                                      "--no-jobs"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        try:
            wait_ready(self.url, self.proc, time.monotonic() + 60, "the benchmark server")
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Member(threading.Thread):
    """One confluent-kafka consumer polled in its own thread; after each poll it publishes what it owns."""

    def __init__(self, name: str, config: dict, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.config, self.stop = config, stop
        self.owned: frozenset[int] | None = None  # None until the consumer exists
        self.created = float("nan")
        self.first_poll = float("nan")
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Consumer

        try:
            self.created = time.monotonic()
            consumer = Consumer(self.config)
            consumer.subscribe([TOPIC])
            self.owned = frozenset()
            try:
                while not self.stop.is_set():
                    if self.first_poll != self.first_poll:
                        self.first_poll = time.monotonic()
                    consumer.poll(POLL_S)
                    self.owned = frozenset(tp.partition for tp in consumer.assignment() if tp.topic == TOPIC)
            finally:
                consumer.close()
        except BaseException as exc:  # noqa: BLE001  (reported by the main thread)
            self.error = exc


def _split(members: list[Member], newcomer: Member | None = None) -> bool:
    """Each partition owned by exactly one member, every member owning some (or only the newcomer must)."""
    sets = [m.owned for m in members]
    if any(s is None for s in sets):
        return False
    if newcomer is None and not all(sets):
        return False
    if newcomer is not None and not newcomer.owned:
        return False
    return sum(len(s) for s in sets) == PARTITIONS and frozenset().union(*sets) == frozenset(range(PARTITIONS))


def _wait(condition, cap_s: float, members: list[Member]) -> float | None:  # type: ignore[no-untyped-def]
    """Seconds until `condition()` holds (checked every 5 ms), None past `cap_s`."""
    started = time.monotonic()
    while not condition():
        for m in members:
            if m.error is not None:
                raise RuntimeError(f"consumer {m.name} failed: {m.error!r}")
        if time.monotonic() - started > cap_s:
            return None
        time.sleep(0.005)
    return time.monotonic() - started


@dataclass
class Runs:
    interval_ms: int
    join_s: list[float] = field(default_factory=list)  # capped at CAP_S
    setup_s: list[float] = field(default_factory=list)
    timeouts: int = 0
    balanced: int = 0  # runs whose settled assignment was 3 partitions each

    def intervals(self, seconds: float) -> float:
        return seconds / (self.interval_ms / 1000)


def one_run(bootstrap: str, protocol: str, run_index: int) -> tuple[float | None, float, bool]:
    """A fresh group of 3, then a 4th: (seconds to the new split or None, seconds to the first split, balanced)."""
    extra, interval_ms = PROTOCOLS[protocol]
    group = f"bench-{protocol}-{run_index}-{time.monotonic_ns()}"
    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", **extra}
    stop = threading.Event()
    members = [Member(f"{protocol}-{i}", {**config, "client.id": f"m{i}"}, stop) for i in range(3)]
    try:
        for m in members:
            m.start()
        setup = _wait(lambda: _split(members), SETUP_CAP_S, members)
        if setup is None:
            raise RuntimeError(f"{protocol}: 3 members never split the partitions: {[m.owned for m in members]}")
        # settled: the split held for one heartbeat interval
        settled_since = time.monotonic()
        while time.monotonic() - settled_since < interval_ms / 1000:
            if not _split(members):
                settled_since = time.monotonic()
            time.sleep(0.01)
        fourth = Member(f"{protocol}-3", {**config, "client.id": "m3"}, stop)
        members.append(fourth)
        fourth.start()
        while fourth.created != fourth.created:  # its thread has not taken the start time yet
            time.sleep(0.001)
        waited = _wait(lambda: _split(members, fourth), CAP_S, members)
        joined = None if waited is None else time.monotonic() - fourth.created
        return joined, setup, joined is not None and all(len(m.owned or ()) == PARTITIONS // 4 for m in members)
    finally:
        stop.set()
        for m in members:
            m.join(60)


def run(console: Console, quick: bool = False, runs: int | None = None) -> list[Figure]:
    runs = runs or (2 if quick else RUNS)
    work = tempfile.mkdtemp(prefix="lakelog-bench-groups-")
    results = {p: Runs(interval) for p, (_, interval) in PROTOCOLS.items()}
    try:
        server = Server(os.path.join(work, "root"))
        try:
            with httpx.Client(base_url=server.url, timeout=30) as c:
                c.post("/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}).raise_for_status()
                records = [{"key": f"k{i}", "value": "v" * 100, "partition": i % PARTITIONS} for i in range(RECORDS)]
                c.post(f"/v1/topics/{TOPIC}/records", json={"records": records}).raise_for_status()
            for r in range(runs):
                for protocol, found in results.items():  # the two protocols alternate: the same conditions
                    joined, setup, balanced = one_run(server.bootstrap, protocol, r)
                    found.setup_s.append(setup)
                    if joined is None:
                        found.timeouts += 1
                        joined = CAP_S
                    found.join_s.append(joined)
                    found.balanced += balanced
                    console.log(f"groups: run {r + 1} of {runs}, group.protocol={protocol}: 3 members split in "
                                f"{setup:.2f} s; a 4th joined, all {PARTITIONS} partitions assigned again in "
                                f"{joined:.2f} s = {found.intervals(joined):.2f} heartbeat intervals "
                                f"({found.interval_ms:,} ms)")
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    kip, classic = results["consumer"], results["classic"]
    figures: list[Figure] = []
    what = f"4th member joins a group of 3 ({PARTITIONS} partitions): all assigned again"
    for stat, pick in (("median", statistics.median), ("max", max)):
        k_s, c_s = pick(kip.join_s), pick(classic.join_s)
        k_n = kip.intervals(k_s)
        figures.append(Figure(
            SUITE, f"KIP-848 (group.protocol=consumer), {what}, {stat} of {runs}", k_n,
            f"heartbeat intervals ({CONSUMER_INTERVAL_MS:,} ms, the default)", f"<= {TARGET_INTERVALS:g}",
            k_n <= TARGET_INTERVALS,
            k_n / TARGET_INTERVALS,
            f"{k_s:.2f} s; ratio to the target; runs {', '.join(f'{s:.2f}' for s in kip.join_s)} s"
            + (f"; {kip.timeouts} not done in {CAP_S:g} s" if kip.timeouts else "")
            + (f"; 3 each in {kip.balanced} of {runs}" if stat == "median" else "")
            + (f"; the 3 members' first split: median {statistics.median(kip.setup_s):.2f} s"
               if stat == "median" else "")))
        figures.append(Figure(
            SUITE, f"classic (cooperative-sticky), {what}, {stat} of {runs}", c_s, "s",
            ratio=c_s / k_s if k_s else None,
            note=f"ratio to KIP-848's seconds; = {classic.intervals(c_s):.2f} of its own heartbeat.interval.ms "
                 f"({CLASSIC_INTERVAL_MS:,} ms, librdkafka's default), {c_s / (CONSUMER_INTERVAL_MS / 1000):.2f} "
                 f"of KIP-848's; runs {', '.join(f'{s:.2f}' for s in classic.join_s)} s"
                 + (f"; {classic.timeouts} not done in {CAP_S:g} s" if classic.timeouts else "")
                 + (f"; 3 each in {classic.balanced} of {runs}" if stat == "median" else "")
                 + (f"; the 3 members' first split: median {statistics.median(classic.setup_s):.2f} s"
                    if stat == "median" else "")))
    return figures


if __name__ == "__main__":  # pragma: no cover
    runs_arg = next((int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--runs=")), None)
    for figure in run(Console(stderr=True), quick="--quick" in sys.argv, runs=runs_arg):
        print(figure)
