"""Share groups (issue 42, KIP-932): 4 share consumers on a 1-partition topic against one classic consumer
reading the same records, with the same client library (confluent-kafka, librdkafka) in the same run.

Target: the share group's records/s >= 0.5x the classic consumer's.

Method, per run: one `lakelog serve --no-jobs` process at the defaults (no `LAKELOG_*` variable passed on), a
topic of 1 partition holding RECORDS records of 100-byte values (produced over HTTP before the clock starts).
- Classic: one `Consumer` (a new group, `auto.offset.reset=earliest`, auto-commit on, librdkafka's defaults)
  polled with `consume(500)` until it has every offset; timed from its assignment (the group's join, with
  `group.initial.rebalance.delay.ms` at its 3 s default, is left out) to its last record.
- Share: 4 `ShareConsumer`s (a new share group, `share.auto.offset.reset=earliest` set with
  IncrementalAlterConfigs on the GROUP resource; implicit acknowledgement, the default: each poll accepts the
  previous one's records), each polled in its own thread until the group has seen every offset; timed from
  the first consumer's creation. Each record's ACCEPT is made durable in `_control/share_state` before the
  next delivery is answered, which the classic path (offsets committed every 5 s) does not pay.
Median over the runs. The consumers and the server share this machine's cores.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time

import httpx
from rich.console import Console

from benchmarks.bench_groups import Server
from benchmarks.common import Figure

SUITE = "share"
TOPIC = "share"
RECORDS = 100_000
SHARE_CONSUMERS = 4
RUNS = 3
TARGET = 0.5
CAP_S = 300.0


def _produce(url: str) -> None:
    with httpx.Client(base_url=url, timeout=120) as client:
        client.post("/v1/topics", json={"name": TOPIC, "partitions": 1}).raise_for_status()
        for start in range(0, RECORDS, 10_000):
            records = [{"key": f"k{i}", "value": "v" * 100} for i in range(start, min(start + 10_000, RECORDS))]
            client.post(f"/v1/topics/{TOPIC}/records", json={"records": records}).raise_for_status()


def classic_run(bootstrap: str, index: int) -> float:
    from confluent_kafka import Consumer

    started = time.monotonic()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"classic-{index}-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest"})
    assigned: list[float] = []

    def on_assign(member: Consumer, partitions: list) -> None:
        assigned.append(time.monotonic())
        member.assign(partitions)

    consumer.subscribe([TOPIC], on_assign=on_assign)
    seen = 0
    try:
        while seen < RECORDS:
            if time.monotonic() - started > CAP_S:
                raise RuntimeError(f"classic consumer stuck at {seen} of {RECORDS}")
            seen += sum(1 for m in consumer.consume(500, 0.2) if m.error() is None)
        return time.monotonic() - assigned[0]
    finally:
        consumer.close()


def _set_earliest(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: its futures fail once it is destroyed
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=60)


def share_run(bootstrap: str, index: int) -> tuple[float, list[int], int]:
    """(seconds, records each consumer got, deliveries beyond one per record)."""
    from confluent_kafka import ShareConsumer

    group = f"share-{index}-{time.monotonic_ns()}"
    _set_earliest(bootstrap, group)
    seen: set[int] = set()
    lock = threading.Lock()
    done = threading.Event()
    counts = [0] * SHARE_CONSUMERS
    extra = [0]
    errors: list[BaseException] = []
    first: list[float] = []
    ended: list[float] = []

    def member(slot: int) -> None:
        try:
            consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
            consumer.subscribe([TOPIC])
            try:
                while not done.is_set():
                    offsets = [m.offset() for m in consumer.poll(0.2) if m.error() is None]
                    counts[slot] += len(offsets)
                    with lock:
                        if offsets and not first:
                            first.append(time.monotonic())
                        extra[0] += sum(1 for o in offsets if o in seen)
                        seen.update(offsets)
                        if len(seen) >= RECORDS:
                            ended.append(time.monotonic())
                            done.set()
            finally:
                consumer.commit_sync()  # implicit mode: accepts the last poll's records (close would release them)
                consumer.close()
        except BaseException as exc:  # noqa: BLE001  (reported by the main thread)
            errors.append(exc)
            done.set()

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(SHARE_CONSUMERS)]
    for thread in threads:
        thread.start()
    finished = done.wait(CAP_S)
    done.set()
    for thread in threads:
        thread.join(60)
    if errors:
        raise RuntimeError(f"a share consumer failed: {errors[0]!r}")
    if not finished:
        raise RuntimeError(f"share consumers stuck at {len(seen)} of {RECORDS}")
    return ended[0] - first[0], counts, extra[0]


def run(console: Console, quick: bool = False, runs: int | None = None) -> list[Figure]:
    runs = runs or (1 if quick else RUNS)
    work = tempfile.mkdtemp(prefix="lakelog-bench-share-")
    classic, share, spread, redelivered = [], [], [], 0
    try:
        server = Server(os.path.join(work, "root"))
        try:
            _produce(server.url)
            for index in range(runs):
                classic.append(classic_run(server.bootstrap, index))
                seconds, counts, extra = share_run(server.bootstrap, index)
                share.append(seconds)
                spread.append(min(counts))
                redelivered += extra
                console.log(f"share run {index + 1}/{runs}: classic {classic[-1]:.2f} s, share {seconds:.2f} s "
                            f"(per consumer {counts}, {extra} redelivered)")
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    classic_rate = RECORDS / statistics.median(classic)
    share_rate = RECORDS / statistics.median(share)
    ratio = share_rate / classic_rate
    return [
        Figure(SUITE, "classic consumer, 1 partition", classic_rate, "records/s",
               note=f"confluent-kafka Consumer, {RECORDS:,} records of 100 B, median of {runs}"),
        Figure(SUITE, f"{SHARE_CONSUMERS} share consumers, same partition", share_rate, "records/s",
               target=f">= {TARGET}x classic", met=ratio >= TARGET, ratio=ratio,
               note=f"confluent-kafka ShareConsumer, implicit acks; fewest records one consumer got: {min(spread)}; "
                    f"redeliveries: {redelivered}"),
    ]
