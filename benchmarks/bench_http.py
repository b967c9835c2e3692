"""HTTP tier benchmarks: JSON and Arrow IPC produce throughput, single-record latency, produce-to-poll
latency through a consumer group, server memory. The server runs in its own process (`lakelog serve`);
the load generator runs on the same machine.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
import pyarrow as pa
from rich.console import Console

from benchmarks.common import Figure, free_port, percentile
from lakelog.platform import Broker
from lakelog.platform.catalog.catalog import MAX_PARTITIONS
from lakelog.settings import Settings

SUITE = "http"
SINGLE_RECORD_BEFORE = 735  # requests/s: single-record produce saturation measured (hey) before the produce rework
HEY_CONNECTIONS = 50
CLIENTS = 4
JSON_BATCH = 1000
ARROW_BATCH = 10_000
PARTITIONS = 8
VALUE = "v" * 100
REPO = Path(__file__).resolve().parents[1]


class Server:
    def __init__(self, root: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "LAKELOG_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"}
        self.proc = subprocess.Popen([sys.executable, "-m", "lakelog.cli", "--root", root, "serve", "--port",
                                      str(self.port), "--kafka-port", "0"], cwd=REPO, env=env,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the benchmark server did not start")
            time.sleep(0.1)
        self.process = psutil.Process(self.proc.pid)

    def rss_mb(self) -> float:
        return self.process.memory_info().rss / 1e6

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _json_body(n: int, seed: int) -> bytes:
    return orjson.dumps({"records": [{"key": f"key-{seed}-{i}", "value": VALUE} for i in range(n)]})


def _arrow_body(n: int) -> bytes:
    table = pa.table({"key": pa.array([f"key-{i}".encode() for i in range(n)], pa.binary()),
                      "value": pa.array([VALUE.encode()] * n, pa.binary())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def throughput(server: Server, topic: str, body: bytes, content_type: str, records_per_request: int,
               seconds: float, sample_rss: bool = False) -> tuple[float, float, int]:
    """Closed loop, CLIENTS concurrent clients: records/s, peak server RSS (MB), errors."""
    stop = time.monotonic() + seconds
    counts = [0] * CLIENTS
    errors = [0] * CLIENTS
    peak = [server.rss_mb()]

    def client(n: int) -> None:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            while time.monotonic() < stop:
                response = c.post(f"/v1/topics/{topic}/records", content=body,
                                  headers={"content-type": content_type})
                if response.status_code == 200:
                    counts[n] += records_per_request
                else:
                    errors[n] += 1

    def sampler() -> None:
        while time.monotonic() < stop:
            peak[0] = max(peak[0], server.rss_mb())
            time.sleep(0.2)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    if sample_rss:
        threads.append(threading.Thread(target=sampler))
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - started), peak[0], sum(errors)


def core_throughput(work: str, arrow: bool, records_per_call: int, seconds: float) -> float:
    """The core library's own produce figure: same clients, same batches, in process."""
    broker = Broker(Settings(root=os.path.join(work, "core-" + ("arrow" if arrow else "records"))))
    try:
        topic = "core"
        broker.create_topic(topic, PARTITIONS)
        table = pa.table({"key": pa.array([f"key-{i}".encode() for i in range(records_per_call)], pa.binary()),
                          "value": pa.array([VALUE.encode()] * records_per_call, pa.binary())})
        from lakelog.platform import Record
        payload = table if arrow else [Record(VALUE.encode(), key=f"key-{i}".encode())
                                       for i in range(records_per_call)]
        stop = time.monotonic() + seconds
        counts = [0] * CLIENTS

        def client(n: int) -> None:
            while time.monotonic() < stop:
                broker.produce(topic, payload)
                counts[n] += records_per_call

        started = time.perf_counter()
        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(client, range(CLIENTS)))
        return sum(counts) / (time.perf_counter() - started)
    finally:
        broker.close()


class _Connection:
    """A keep-alive HTTP/1.1 connection on raw asyncio streams: a load generator light enough to not be the
    bottleneck on a 2-core machine (httpx's async pool is, at 1,000 requests/s)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def request(self, raw: bytes) -> int:
        self.writer.write(raw)
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length"))
        await self.reader.readexactly(length)
        return int(lines[0].split()[1])


async def _single_record_latency(port: int, topic: str, rate: int, seconds: float) -> tuple[list[float], int]:
    """Open loop: one request every 1/rate s whatever the answers; latency from the scheduled send time."""
    body = orjson.dumps({"records": [{"key": "k", "value": VALUE}]})
    raw = (f"POST /v1/topics/{topic}/records HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    idle: asyncio.Queue[_Connection] = asyncio.Queue()
    for _ in range(200):
        idle.put_nowait(_Connection(*await asyncio.open_connection("127.0.0.1", port)))
    latencies: list[float] = []
    errors = 0

    async def one(scheduled: float) -> None:
        nonlocal errors
        connection = await idle.get()
        try:
            status = await connection.request(raw)
        finally:
            idle.put_nowait(connection)
        if status == 200:
            latencies.append((time.perf_counter() - scheduled) * 1000)
        else:
            errors += 1

    tasks = []
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        scheduled = start + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(scheduled)))
    await asyncio.gather(*tasks)
    while not idle.empty():
        idle.get_nowait().writer.close()
    return latencies, errors


def hey(url: str, seconds: float, rate_per_connection: int | None = None,
        json_body: bytes | None = None) -> tuple[float, float, float] | None:
    """Requests/s, p50 and p99 (ms) as measured by `hey` (a C-speed load generator: a Python client on the
    same 2 cores would measure itself); None when hey is not installed (`apt-get install hey`)."""
    if shutil.which("hey") is None:
        return None
    command = ["hey", "-z", f"{seconds:g}s", "-c", str(HEY_CONNECTIONS)]
    if rate_per_connection:
        command += ["-q", str(rate_per_connection)]
    with tempfile.NamedTemporaryFile(suffix=".json") as body:
        if json_body is not None:
            body.write(json_body)
            body.flush()
            command += ["-m", "POST", "-T", "application/json", "-D", body.name]
        out = subprocess.run([*command, url], capture_output=True, text=True, timeout=seconds + 120).stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p50, p99 = re.search(r"50% in ([\d.]+) secs", out), re.search(r"99% in ([\d.]+) secs", out)
    if not (rate and p50 and p99):
        return None
    return float(rate.group(1)), float(p50.group(1)) * 1000, float(p99.group(1)) * 1000


def single_record_figures(server: "Server", topic: str, seconds: float) -> list[Figure]:
    """Per-request CPU: single-record produce at saturation and at 500 requests/s offered, next to the
    framework's own ceiling (GET /healthz) measured the same way in the same run."""
    body = orjson.dumps({"records": [{"key": "k1", "value": VALUE}]})
    records = f"{server.url}/v1/topics/{topic}/records"
    hey(records, 2, json_body=body)  # warm-up
    ceiling = hey(f"{server.url}/healthz", seconds)
    saturated = hey(records, seconds, json_body=body)
    offered = hey(records, seconds, rate_per_connection=500 // HEY_CONNECTIONS, json_body=body)
    if ceiling is None or saturated is None or offered is None:
        return [Figure(SUITE, "single-record produce with hey", float("nan"), "", note="hey not installed")]
    target = 3 * SINGLE_RECORD_BEFORE
    return [
        Figure(SUITE, f"framework ceiling: GET /healthz, {HEY_CONNECTIONS} connections (hey)", ceiling[0],
               "requests/s", note="reference"),
        Figure(SUITE, f"single-record produce at saturation, {HEY_CONNECTIONS} connections (hey)", saturated[0],
               "requests/s", f">= {target:,} (3x {SINGLE_RECORD_BEFORE})", saturated[0] >= target,
               saturated[0] / ceiling[0], f"ratio to the ceiling; p99 {saturated[2]:.0f} ms"),
        Figure(SUITE, "single-record produce at 500 requests/s offered (hey), p50", offered[1], "ms"),
        Figure(SUITE, "single-record produce at 500 requests/s offered (hey), p99", offered[2], "ms", "<= 50",
               offered[2] <= 50, note=f"{offered[0]:.0f} requests/s served"),
    ]


def _run_async(coroutine: Any) -> Any:
    try:  # a lighter event loop for the load generator when available
        import uvloop

        return uvloop.run(coroutine)
    except ImportError:
        return asyncio.run(coroutine)


def produce_to_poll(server: Server, topic: str, rate: int, seconds: float) -> list[float]:
    """A group member long-polls; a producer sends single records stamped with the wall clock."""
    latencies: list[float] = []
    done = threading.Event()
    with httpx.Client(base_url=server.url, timeout=30) as c:
        member = c.post("/v1/groups/bench/members", json={"topics": [topic], "auto.offset.reset": "latest",
                                                          "enable.auto.commit": False}).json()["member_id"]
        c.post(f"/v1/groups/bench/members/{member}/heartbeat")
        c.get(f"/v1/groups/bench/members/{member}/records", params={"timeout_ms": 0})  # positions at the end

        def consume() -> None:
            with httpx.Client(base_url=server.url, timeout=30) as cc:
                while not done.is_set():
                    records = cc.get(f"/v1/groups/bench/members/{member}/records",
                                     params={"timeout_ms": 500, "max_records": 1000}).json()["records"]
                    now = time.time() * 1000
                    latencies.extend(now - float(r["value"]) for r in records)

        consumer = threading.Thread(target=consume)
        consumer.start()
        time.sleep(0.3)
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            c.post(f"/v1/topics/{topic}/records", json={"records": [{"value": repr(time.time() * 1000)}]})
        time.sleep(1.0)
        done.set()
        consumer.join()
    return latencies


def largest_create(server: Server) -> float:
    """Seconds to create a topic of the most partitions a topic may have, over HTTP (a local folder): the
    response describes every partition."""
    with httpx.Client(base_url=server.url, timeout=60) as c:
        start = time.perf_counter()
        response = c.post("/v1/topics", json={"name": "largest", "partitions": MAX_PARTITIONS})
        elapsed = time.perf_counter() - start
    response.raise_for_status()
    assert len(response.json()["partitions"]) == MAX_PARTITIONS
    return elapsed


def run(console: Console, quick: bool = False) -> list[Figure]:
    seconds = 4 if quick else 10
    work = tempfile.mkdtemp(prefix="lakelog-bench-http-")
    figures: list[Figure] = []
    server = Server(os.path.join(work, "server"))
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            for topic in ("json", "arrow", "single", "e2e"):
                c.post("/v1/topics", json={"name": topic, "partitions": PARTITIONS})
        console.log(f"http: create a {MAX_PARTITIONS:,}-partition topic")
        seconds_taken = largest_create(server)
        figures.append(Figure(SUITE, f"create a {MAX_PARTITIONS:,}-partition topic over HTTP (local folder)",
                              seconds_taken, "s", "<= 1 s", seconds_taken <= 1))
        console.log("http: core produce, 4 in-process clients, 1,000-record Record lists (reference)")
        core_json = core_throughput(work, False, JSON_BATCH, seconds)
        figures.append(Figure(SUITE, f"core produce, {CLIENTS} threads, {JSON_BATCH:,}-record Record lists",
                              core_json, "records/s", note="reference for the JSON ratio"))
        console.log("http: JSON produce, 1,000 records/request, 4 clients")
        rate, peak, errors = throughput(server, "json", _json_body(JSON_BATCH, 1), "application/json", JSON_BATCH,
                                        seconds, sample_rss=True)
        figures.append(Figure(SUITE, f"JSON produce, {JSON_BATCH:,} records/request, {CLIENTS} clients", rate,
                              "records/s", ">= 100,000", rate >= 100_000, rate / core_json,
                              f"ratio to core; {errors} errors"))
        figures.append(Figure(SUITE, "server resident memory under the JSON load (peak)", peak, "MB", "<= 1,000",
                              peak <= 1000))
        console.log("http: core produce, Arrow batches (reference)")
        core_arrow = core_throughput(work, True, ARROW_BATCH, seconds)
        figures.append(Figure(SUITE, f"core produce, {CLIENTS} threads, {ARROW_BATCH:,}-record Arrow batches",
                              core_arrow, "records/s", note="reference for the Arrow ratio"))
        console.log("http: Arrow IPC produce")
        rate, _, errors = throughput(server, "arrow", _arrow_body(ARROW_BATCH), "application/vnd.apache.arrow.stream",
                                     ARROW_BATCH, seconds)
        figures.append(Figure(SUITE, f"Arrow IPC produce, {ARROW_BATCH:,} records/request, {CLIENTS} clients", rate,
                              "records/s", ">= 400,000", rate >= 400_000, rate / core_arrow,
                              f"ratio to core; {errors} errors"))
        console.log("http: single-record produce with hey: saturation and 500 requests/s offered")
        figures += single_record_figures(server, "single", seconds)
        console.log("http: single-record produce at 1,000 requests/s")
        latencies, errors = _run_async(_single_record_latency(server.port, "single", 1000, seconds))
        figures.append(Figure(SUITE, "single-record produce at 1,000 requests/s, p50", percentile(latencies, 50),
                              "ms"))
        p99 = percentile(latencies, 99)
        figures.append(Figure(SUITE, "single-record produce at 1,000 requests/s, p99", p99, "ms", "<= 50",
                              p99 <= 50, note=f"{errors} errors"))
        console.log("http: produce-to-poll latency through a consumer group")
        e2e = produce_to_poll(server, "e2e", 100, seconds)
        figures.append(Figure(SUITE, "produce-to-poll latency via a group, p50", percentile(e2e, 50), "ms",
                              note=f"{len(e2e)} records at 100/s"))
        p99 = percentile(e2e, 99)
        figures.append(Figure(SUITE, "produce-to-poll latency via a group, p99", p99, "ms", "<= 150", p99 <= 150))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return figures


if __name__ == "__main__":  # pragma: no cover
    for figure in run(Console(stderr=True), quick="--quick" in sys.argv):
        print(figure)
