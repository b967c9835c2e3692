"""Kafka listener benchmarks: lakelog's Kafka wire protocol (two librdkafka clients: confluent-kafka and kcat,
librdkafka's CLI) against its HTTP Arrow path and a raw read, in one run.

`lakelog serve --no-jobs`, its Kafka listener on a free port; the clients run in this process or as its child
(kcat), on the same machine: client and server share its cores, on both sides of each ratio. The server's
CPU seconds (psutil) over each path's rounds give its CPU-s per million records.

Produce: the same keyed records (keys `key-<i>`, 100-byte values, 8 partitions) sent by confluent-kafka's
Producer (acks=all, idempotent, linger.ms=5; poll(0) after each produce() serves the delivery callbacks), by
kcat -P (the same settings, from a file of `key<TAB>value` lines written before its timing; its records
counted from the high watermarks) and, to another topic, as Arrow IPC streams of 10,000 records POSTed by 4
clients (the http suite's Arrow shape), in alternated rounds so that other load on the machine hits the paths
alike. All keep at most 40,000 records in flight (queue.buffering.max.messages; 4 requests of 10,000), so
latencies compare: a record's is its delivery callback's time minus its produce() call's; through HTTP, its
request's; kcat reports none.

Consume: a 1,000,000-record topic of the same shape, written through the HTTP Arrow path, read from
earliest to the end by confluent-kafka's Consumer with a manual assign (no group) and by kcat -C -e, each on
a fresh server process (no tail cache: the fetches read the files), against deltalake reading the same table
(all columns) to Arrow in this process; alternated too. kcat's records are counted from its output.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

import httpx
import psutil
import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from deltalake import DeltaTable
from lakelog.platform.layout import topic_path
from rich.console import Console

from benchmarks.common import Figure, free_port, percentile

SUITE = "kafka"
REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 8
VALUE = b"v" * 100
ARROW_BATCH = 10_000  # records per HTTP request, as in the http suite's Arrow figure
HTTP_CLIENTS = 4
IN_FLIGHT = ARROW_BATCH * HTTP_CLIENTS  # records outstanding at most, on both produce paths
PRODUCE_RECORDS = 3_000_000  # by each path, in PRODUCE_ROUNDS alternated rounds
PRODUCE_ROUNDS = 3
CONSUME_RECORDS = 1_000_000
CONSUME_ROUNDS = 2
ARROW_STREAM = "application/vnd.apache.arrow.stream"
KCAT = shutil.which("kcat") or "/usr/bin/kcat"  # Debian's package; librdkafka's CLI
KCAT_SETTINGS = ["-X", "enable.idempotence=true", "-X", "acks=all", "-X", "linger.ms=5",
                 "-X", f"queue.buffering.max.messages={IN_FLIGHT}"]  # as confluent-kafka's Producer
KEY_DELIMITER = b"\t"  # kcat -K; records end in a newline (kcat -D's default): neither is in a key or a value
assert KEY_DELIMITER not in VALUE and b"\n" not in VALUE
PRODUCE_TARGET, CONSUME_TARGET = 0.9, 0.7  # issue 44: of HTTP Arrow's records/s, of the raw read's
SERVER_CPU_TARGET = 1.2  # issue 44: the Kafka produce path's server CPU per record, as a multiple of HTTP Arrow's
Run = tuple[float, int, list[float], int]  # seconds, records, per-record latencies (ms), errors


class Server:
    """`lakelog serve --no-jobs` with its Kafka listener on a free port."""

    def __init__(self, root: str) -> None:
        self.port, self.kafka_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.bootstrap = f"127.0.0.1:{self.kafka_port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "lakelog.cli", "--root", root, "serve", "--port",
                                      str(self.port), "--kafka-port", str(self.kafka_port), "--no-jobs"], cwd=REPO,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    with socket.create_connection(("127.0.0.1", self.kafka_port), timeout=1):
                        break
            except (httpx.HTTPError, OSError):
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.proc.kill()
                raise RuntimeError("the benchmark server did not start")
            time.sleep(0.1)
        self.process = psutil.Process(self.proc.pid)

    def cpu_seconds(self) -> float:
        return _cpu(self.process)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _keys(start: int, n: int) -> list[bytes]:
    return [f"key-{i}".encode() for i in range(start, start + n)]


def _arrow_body(keys: list[bytes]) -> bytes:
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array([VALUE] * len(keys), pa.binary())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def arrow_produce(url: str, topic: str, n: int, first: int = 0) -> Run:
    """N records (keys from `first` on) as Arrow IPC requests of ARROW_BATCH, HTTP_CLIENTS closed-loop
    clients; the latency of a record is its request's. Each client builds its request's stream from the
    keys, as a client would."""
    chunks = iter(range(first, first + n, ARROW_BATCH))
    lock = threading.Lock()
    latencies: list[float] = []
    errors = [0]

    def client() -> None:
        with httpx.Client(base_url=url, timeout=120) as c:
            while True:
                with lock:
                    start = next(chunks, None)
                if start is None:
                    return
                count = min(ARROW_BATCH, first + n - start)
                body = _arrow_body(_keys(start, count))
                sent = time.perf_counter()
                while True:  # 503 and 429 are back-pressure (tables behind the journal, bytes in flight): a
                    # client retries them, as a Kafka client retries a retriable error
                    response = c.post(f"/v1/topics/{topic}/records", content=body,
                                      headers={"content-type": ARROW_STREAM})
                    if response.status_code not in (429, 503):
                        break
                    time.sleep(0.05)
                took = (time.perf_counter() - sent) * 1000
                with lock:
                    latencies.extend([took] * count)
                    if response.status_code != 200:
                        errors[0] += 1

    threads = [threading.Thread(target=client) for _ in range(HTTP_CLIENTS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started, n, latencies, errors[0]


def kafka_produce(bootstrap: str, topic: str, n: int, first: int = 0) -> Run:
    """N keyed records (keys from `first` on) through one confluent-kafka Producer: seconds from the first
    produce() to the last delivery; a record's latency is its delivery callback's time minus its
    produce()'s; errors are failed deliveries."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "queue.buffering.max.messages": IN_FLIGHT})
    producer.list_topics(topic, timeout=30)  # metadata and the connection, outside the timing
    sent = [0.0] * n
    latencies: list[float] = []
    failed = [0]
    clock = time.perf_counter

    def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
        now = clock()
        if err is not None:
            failed[0] += 1
            return
        latencies.append((now - sent[int(msg.key()[4:]) - first]) * 1000)

    produce, poll = producer.produce, producer.poll
    started = clock()
    for i in range(n):
        key = f"key-{first + i}".encode()
        while True:
            try:
                sent[i] = clock()
                produce(topic, VALUE, key, on_delivery=delivered)
                break
            except BufferError:  # IN_FLIGHT records outstanding: wait for deliveries
                poll(0.005)
        poll(0)  # confluent-kafka's usual loop: delivery callbacks served as they come
    while len(latencies) + failed[0] < n:
        producer.flush(1)
    elapsed = clock() - started
    return elapsed, n, latencies, failed[0]


def kafka_consume(bootstrap: str, topic: str, n: int) -> Run:
    """Every partition assigned from the beginning (no group), read until N records (no latencies)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lakelog-bench-unused",
                         "enable.auto.commit": False, "enable.auto.offset.store": False})
    try:
        consumer.list_topics(topic, timeout=30)
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        count = 0
        deadline = time.monotonic() + 600
        while count < n and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 1.0):
                error = message.error()
                if error is None:
                    count += 1
                elif error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"consume failed: {error}")
        return time.perf_counter() - started, count, [], 0
    finally:
        consumer.close()


def kcat_input(path: str, first: int, n: int) -> None:
    """N `key-<i><TAB>value` lines (keys from `first` on) for kcat -P, written before its timing."""
    value, delimiter = VALUE.decode(), KEY_DELIMITER.decode()
    Path(path).write_text("".join(f"key-{i}{delimiter}{value}\n" for i in range(first, first + n)))


def high_watermarks(bootstrap: str, topic: str) -> int:
    """The sum of the topic's partitions' high watermarks: how many records landed."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lakelog-bench-unused"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS))
    finally:
        consumer.close()


def landed(bootstrap: str, topic: str, before: int, run: Run) -> Run:
    """`run` of N records to `topic`, its records those its high watermarks grew by from `before` (at most N),
    its errors plus the records short of (or beyond) N: a failure is not counted as speed."""
    seconds, n, latencies, errors = run
    count = high_watermarks(bootstrap, topic) - before
    return seconds, min(count, n), latencies, errors + abs(n - count)


def kcat_produce(bootstrap: str, topic: str, path: str, n: int) -> Run:
    """kcat -P sends the N lines of `path`: seconds from its start (connection and metadata: a few ms) to its
    exit, after its last delivery; errors 1 for a failed exit; N records, which `landed` then checks."""
    with open(path, "rb") as f:
        started = time.perf_counter()
        done = subprocess.run([KCAT, "-P", "-q", "-b", bootstrap, "-t", topic, "-K", KEY_DELIMITER.decode(),
                               *KCAT_SETTINGS], stdin=f, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              timeout=600)
        elapsed = time.perf_counter() - started
    if done.returncode or done.stderr.strip():
        print(f"kcat -P: exit {done.returncode}: {done.stderr.decode(errors='replace')[-2000:]}", file=sys.stderr)
    return elapsed, n, [], int(done.returncode != 0)


def kcat_consume(bootstrap: str, topic: str, n: int, out: str) -> Run:
    """kcat -C, every partition from the beginning to its end (-e), no group, a `<partition>` line per record to
    `out`: seconds from its start to its exit; records the lines (at most N); errors 1 if not N or it failed."""
    with open(out, "wb") as f:
        started = time.perf_counter()
        done = subprocess.run([KCAT, "-C", "-q", "-e", "-b", bootstrap, "-t", topic, "-o", "beginning",
                               "-f", "%p\\n"], stdout=f, stderr=subprocess.PIPE, timeout=600)
        elapsed = time.perf_counter() - started
    count = Path(out).read_bytes().count(b"\n")
    if done.returncode or count != n:
        print(f"kcat -C: exit {done.returncode}, {count:,} of {n:,} records: "
              f"{done.stderr.decode(errors='replace')[-2000:]}", file=sys.stderr)
    return elapsed, min(count, n), [], int(done.returncode != 0 or count != n)


def raw_read(root: str, topic: str) -> tuple[float, int]:
    """deltalake opens the topic's table and reads all its columns to Arrow: seconds, records."""
    started = time.perf_counter()
    table = DeltaTable(os.path.join(root, topic_path(topic))).to_pyarrow_table()
    return time.perf_counter() - started, table.num_rows


def _create(url: str, *topics: str) -> None:
    with httpx.Client(base_url=url, timeout=30) as c:
        for topic in topics:
            c.post("/v1/topics", json={"name": topic, "partitions": PARTITIONS}).raise_for_status()


class Phase:
    """Wall time, records and CPU seconds of the server and of the clients (this process, librdkafka's threads
    included, and its children waited for in the round: kcat) summed over the rounds of one path; a round's
    `check` (if any) revises its Run once the CPU seconds are read."""

    def __init__(self) -> None:
        self.wall_s = self.server_s = self.client_s = 0.0
        self.records = 0
        self.latencies: list[float] = []
        self.errors = 0
        self.rates: list[float] = []

    def measure(self, server: Server, func: Callable[..., Run], *args: Any,
                check: Callable[[Run], Run] | None = None) -> None:
        server_s, client_s = server.cpu_seconds(), _cpu(psutil.Process(), children=True)
        result = func(*args)
        self.server_s += server.cpu_seconds() - server_s
        self.client_s += _cpu(psutil.Process(), children=True) - client_s
        seconds, records, latencies, errors = check(result) if check else result
        self.latencies += latencies
        self.wall_s += seconds
        self.records += records
        self.errors += errors
        self.rates.append(records / seconds)

    @property
    def rate(self) -> float:
        return self.records / self.wall_s

    def per_cpu(self) -> float:
        return self.records / (self.server_s + self.client_s)

    def server_per_million(self) -> float:
        return self.server_s / self.records * 1e6 if self.records else float("nan")

    def note(self) -> str:
        spread = ", ".join(f"{r:,.0f}" for r in self.rates)
        return (f"rounds {spread}; server {self.records / self.server_s:,.0f} records/CPU-s; CPU-s in "
                f"{self.wall_s:.1f} s: server {self.server_s:.1f}, clients {self.client_s:.1f}")


def _cpu(process: psutil.Process, children: bool = False) -> float:
    times = process.cpu_times()
    return times.user + times.system + (times.children_user + times.children_system if children else 0.0)


def run(console: Console, quick: bool = False) -> list[Figure]:
    produce_n = 200_000 if quick else PRODUCE_RECORDS
    consume_n = 200_000 if quick else CONSUME_RECORDS
    per_round = produce_n // PRODUCE_ROUNDS // ARROW_BATCH * ARROW_BATCH
    work = tempfile.mkdtemp(prefix="lakelog-bench-kafka-")
    root, lines, out = (os.path.join(work, name) for name in ("root", "kcat-input", "kcat-output"))
    arrow, kafka, kcat, consume, kcat_c = Phase(), Phase(), Phase(), Phase(), Phase()
    raw_seconds: list[float] = []
    raw_rows, raw_cpu = 0, 0.0
    load = os.getloadavg()[0]
    try:
        server = Server(root)
        try:
            _create(server.url, "warm-kafka", "warm-kcat", "warm-arrow", "produce-kafka", "produce-kcat",
                    "produce-arrow", "consume")
            console.log("kafka: warm-up (20,000 records each path)")
            kafka_produce(server.bootstrap, "warm-kafka", 20_000)
            kcat_input(lines, 0, 20_000)
            kcat_produce(server.bootstrap, "warm-kcat", lines, 20_000)
            arrow_produce(server.url, "warm-arrow", 20_000)
            for r in range(PRODUCE_ROUNDS):  # alternated, so that other load on the machine hits all alike
                console.log(f"kafka: produce round {r + 1} of {PRODUCE_ROUNDS}: {per_round:,} records by each path")
                kcat_input(lines, r * per_round, per_round)  # kcat's input, outside the timing
                arrow.measure(server, arrow_produce, server.url, "produce-arrow", per_round, r * per_round)
                kafka.measure(server, kafka_produce, server.bootstrap, "produce-kafka", per_round, r * per_round)
                before = high_watermarks(server.bootstrap, "produce-kcat")  # its records: counted as landed
                kcat.measure(server, kcat_produce, server.bootstrap, "produce-kcat", lines, per_round,
                             check=partial(landed, server.bootstrap, "produce-kcat", before))
            os.remove(lines)
            console.log(f"kafka: writing the {consume_n:,}-record topic through HTTP Arrow")
            _, _, _, errors = arrow_produce(server.url, "consume", consume_n)
            if errors:
                raise RuntimeError(f"populating the consume topic: {errors} failed requests")
        finally:
            server.stop()
        for r in range(CONSUME_ROUNDS):
            console.log(f"kafka: consume round {r + 1} of {CONSUME_ROUNDS}: raw deltalake read, then "
                        "confluent-kafka and kcat from earliest, each on a fresh server")
            cpu = _cpu(psutil.Process())
            seconds, raw_rows = raw_read(root, "consume")
            raw_cpu += _cpu(psutil.Process()) - cpu
            raw_seconds.append(seconds)
            for phase, func, args in ((consume, kafka_consume, ()), (kcat_c, kcat_consume, (out,))):
                server = Server(root)  # a fresh node: no tail cache nor footer cache, the fetches read the files
                try:
                    phase.measure(server, func, server.bootstrap, "consume", consume_n, *args)
                finally:
                    server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    raw_rate, raw_per_cpu = (raw_rows * len(raw_seconds) / x for x in (sum(raw_seconds), raw_cpu))
    return _figures(arrow, kafka, kcat, consume, kcat_c, raw_rate, raw_per_cpu, raw_rows, raw_seconds, load)


def _figures(arrow: Phase, kafka: Phase, kcat: Phase, consume: Phase, kcat_c: Phase, raw_rate: float,
             raw_per_cpu: float, raw_rows: int, raw_seconds: list[float], load: float) -> list[Figure]:
    arrow_p99, kafka_p99 = percentile(arrow.latencies, 99), percentile(kafka.latencies, 99)
    shape = f"{arrow.records:,} keyed records, 100-byte values, {PARTITIONS} partitions"
    arrow_per_cpu, arrow_server, raw_per_million = arrow.per_cpu(), arrow.server_per_million(), 1e6 / raw_per_cpu
    figures: list[Figure] = []

    def fig(name: str, value: float, unit: str, **kw: Any) -> None:
        figures.append(Figure(SUITE, name, value, unit, **kw))

    fig(f"produce via HTTP Arrow IPC, {ARROW_BATCH:,} records/request, {HTTP_CLIENTS} clients", arrow.rate,
        "records/s", note=f"reference; {shape}; {arrow.errors} errors; {arrow.note()}; the machine's 1-minute "
                          f"load average at the start: {load:.1f}")
    produce = [("confluent-kafka", kafka, f"confluent-kafka's Producer in this process; {kafka.errors} failed"),
               ("kcat", kcat, f"kcat -P from a file prepared beforehand, its process's start to its exit; "
                              f"{kcat.errors} missing from the high watermarks or failed")]
    for client, phase, what in produce:
        ratio = phase.rate / arrow.rate
        fig(f"produce via the Kafka listener, {client}, acks=all, idempotent, linger.ms=5", phase.rate, "records/s",
            target=f">= {PRODUCE_TARGET}x HTTP Arrow", met=ratio >= PRODUCE_TARGET, ratio=ratio,
            note=f"ratio to HTTP Arrow; the same records; {what}; {phase.note()}")
    fig("produce, HTTP Arrow: records per CPU-second, server and clients together", arrow_per_cpu, "records/CPU-s",
        note="reference")
    fig("produce, server CPU-seconds per million records, HTTP Arrow", arrow_server, "CPU-s",
        note=f"reference; the server process's user+system CPU over the rounds, {arrow.server_s:.1f} CPU-s")
    for client, phase, _ in produce:
        fig(f"produce, Kafka ({client}): records per CPU-second, server and clients together", phase.per_cpu(),
            "records/CPU-s", ratio=phase.per_cpu() / arrow_per_cpu, note="ratio to HTTP Arrow: the throughput "
            "ratio expected when the cores are the limit" + ("; kcat's process included" if phase is kcat else ""))
        ratio = phase.server_per_million() / arrow_server
        fig(f"produce, server CPU-seconds per million records, Kafka ({client})", phase.server_per_million(), "CPU-s",
            target=f"<= {SERVER_CPU_TARGET}x HTTP Arrow's", met=ratio <= SERVER_CPU_TARGET, ratio=ratio,
            note=f"ratio to HTTP Arrow's {arrow_server:.2f}; {phase.server_s:.1f} CPU-s for {phase.records:,} records")
    fig("produce delivery latency p50, HTTP Arrow (each request's, for each of its records)",
        percentile(arrow.latencies, 50), "ms")
    fig("produce delivery latency p99, HTTP Arrow (each request's, for each of its records)", arrow_p99, "ms",
        note=f"{arrow.records // ARROW_BATCH} requests")
    fig("produce delivery latency p50, Kafka (confluent-kafka: delivery callback minus produce())",
        percentile(kafka.latencies, 50), "ms")
    fig("produce delivery latency p99, Kafka (confluent-kafka: delivery callback minus produce())", kafka_p99, "ms",
        ratio=kafka_p99 / arrow_p99, note=f"ratio to HTTP Arrow; at most {IN_FLIGHT:,} records in flight on both")
    fig("raw read: deltalake DeltaTable(...).to_pyarrow_table(), all columns", raw_rate, "records/s",
        note=f"reference; {raw_rows:,} records, in this process; rounds "
             + ", ".join(f"{raw_rows / s:,.0f}" for s in raw_seconds))
    consumers = [("confluent-kafka", consume, f"manual assign of {PARTITIONS} partitions from earliest",
                  f"confluent-kafka's Consumer in this process; {consume.errors} errors"),
                 ("kcat", kcat_c, f"kcat -C -o beginning -e, all {PARTITIONS} partitions, no group",
                  "its process's start to its exit, one '%p' line per record to a file, counted after; "
                  f"{kcat_c.errors} rounds short or failed")]
    for client, phase, how, what in consumers:
        ratio = phase.rate / raw_rate
        fig(f"consume via the Kafka listener, {client}, {how}", phase.rate, "records/s",
            target=f">= {CONSUME_TARGET}x raw read", met=ratio >= CONSUME_TARGET, ratio=ratio,
            note=f"ratio to the raw read; {raw_rows:,} records of 100-byte values each round; fresh server; {what}; "
                 f"{phase.note()}")
    for client, phase, _, _ in consumers:
        fig(f"consume, Kafka ({client}): records per CPU-second, server and consumer together", phase.per_cpu(),
            "records/CPU-s", ratio=phase.per_cpu() / raw_per_cpu,
            note=f"ratio to the raw read's {raw_per_cpu:,.0f} records/CPU-s")
        fig(f"consume, server CPU-seconds per million records, Kafka ({client})", phase.server_per_million(),
            "CPU-s", ratio=phase.server_per_million() / raw_per_million,
            note=f"ratio to the raw read's {raw_per_million:.2f} CPU-s per million records (this process reading "
                 f"the table, no server); {phase.server_s:.1f} CPU-s for {phase.records:,} records")
    return figures


if __name__ == "__main__":  # pragma: no cover
    for figure in run(Console(stderr=True), quick="--quick" in sys.argv):
        print(figure)
