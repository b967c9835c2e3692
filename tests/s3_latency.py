"""A latency model of object storage that everyone can run: a delaying TCP proxy in front of the
loopback S3 endpoint (moto's server), and a count of the requests that pass through it, by kind.

The proxy behaves like netem on a link: every chunk of bytes, in either direction, is delivered
`delay` seconds after it was received, in order, and delays are not serialised (a chunk received at t
leaves at t + delay, however many chunks are in flight). Presets: `S3_STANDARD` (a 30 ms round trip)
and `S3_EXPRESS` (4 ms).

Connections: moto's server (werkzeug) answers every request with `Connection: close`, so clients open
a connection per request. On loopback that is free, and with no handshake charged (the default) each
request pays exactly one round trip: what a warm keep-alive connection to S3 costs. Cold connections
(TCP, and TLS on real S3) are not modelled by default; `handshake_round_trips=1` charges each new
connection a round trip, which only models S3 against an endpoint that keeps connections alive.

The proxy runs in its own process, as moto does: delta-rs calls that hold the GIL, and the test's or
benchmark's own Python work, must neither stall the proxy nor add jitter to its delays. The parent
talks to it over the child's stdin/stdout, one JSON line per command.

Request kinds (path-style addressing, `/bucket/key`): `put_log` (a PUT of a key under `_delta_log/`),
`put_data` (any other object PUT, multipart uploads included), `get`, `head`, `list` (a GET of the
bucket: ListObjectsV2 and friends), `delete` (DELETE, or POST ?delete), `other` (bucket creation, ...).

Used by tests (`from s3_latency import ...`, tests/ is on sys.path) and benchmarks
(`from tests.s3_latency import ...`, run from the repo root).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, NamedTuple
from urllib.parse import parse_qs, unquote

S3_STANDARD = 0.015  # one way: a 30 ms round trip, like S3 Standard in-region
S3_EXPRESS = 0.002  # one way: a 4 ms round trip, like S3 Express One Zone

KINDS = ("put_data", "put_log", "get", "head", "list", "delete", "other")
CHUNK_BYTES = 64 * 1024


class Request(NamedTuple):
    kind: str
    method: str
    target: str  # path and query, as sent
    at: float = 0.0  # when its head reached the proxy (the proxy's monotonic clock, seconds)


def classify(method: str, target: str) -> str:
    """The kind of one S3 request (path-style: /bucket/key?query)."""
    path, _, query = target.partition("?")
    params = parse_qs(query, keep_blank_values=True)
    key = unquote(path.lstrip("/").partition("/")[2])
    if method == "PUT":
        if not key:
            return "other"  # bucket creation or configuration
        return "put_log" if key.startswith("_delta_log/") or "/_delta_log/" in key else "put_data"
    if method == "POST":
        if "delete" in params:
            return "delete"
        return "put_data" if key and ("uploads" in params or "uploadId" in params) else "other"
    if method == "GET":
        return "list" if not key or "list-type" in params else "get"
    if method == "HEAD":
        return "head" if key else "other"
    if method == "DELETE":
        return "delete"
    return "other"


@dataclass
class Counted:
    """The requests seen during a measured block, by kind."""

    requests: list[Request] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        found = Counter(r.kind for r in self.requests)
        return {kind: found.get(kind, 0) for kind in KINDS}

    @property
    def total(self) -> int:
        return len(self.requests)

    def describe(self) -> str:
        """One line per request, for assertion messages."""
        return "\n".join(f"{r.kind:8} {r.method:6} {r.target}" for r in self.requests)

    def round_trips(self, one_way_delay_s: float) -> int:
        """How many round trips the requests took, when the proxy delays each way by `one_way_delay_s`:
        requests sent together (in parallel) reach the proxy within a few ms of each other, and a request
        sent after another's answer comes at least two delays later; so arrivals more than one delay apart
        start a new round trip."""
        times = sorted(r.at for r in self.requests)
        return sum(1 for i, t in enumerate(times) if i == 0 or t - times[i - 1] > one_way_delay_s)


class CounterView:
    """What tests and benchmarks ask of a counter; `requests(since)` and `position()` are the primitives."""

    def requests(self, since: int = 0) -> list[Request]:
        raise NotImplementedError

    def position(self) -> int:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def connections(self) -> int:
        """TCP connections opened through the proxy since the last reset (each paid a handshake)."""
        raise NotImplementedError

    def snapshot(self) -> dict[str, int]:
        return Counted(self.requests()).counts

    @contextmanager
    def measure(self) -> Iterator[Counted]:
        """`with counter.measure() as counted:` -- the requests made by the block (filled in at its end)."""
        start = self.position()
        counted = Counted()
        yield counted
        counted.requests = self.requests(since=start)


class RequestCounter(CounterView):
    """Thread-safe record of requests, in arrival order (lives in the proxy's process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._log: list[Request] = []
        self._connections = 0

    def record_connection(self) -> None:
        with self._lock:
            self._connections += 1

    def connections(self) -> int:
        with self._lock:
            return self._connections

    def record(self, method: str, target: str) -> None:
        with self._lock:
            self._log.append(Request(classify(method, target), method, target, time.monotonic()))

    def requests(self, since: int = 0) -> list[Request]:
        with self._lock:
            return self._log[since:]

    def position(self) -> int:
        with self._lock:
            return len(self._log)

    def reset(self) -> None:
        with self._lock:
            self._log.clear()
            self._connections = 0


class HttpRequestStream:
    """Splits one connection's client-to-server bytes into HTTP/1.1 requests (keep-alive: many per
    connection; bodies framed by Content-Length or chunked transfer encoding) and reports each head."""

    def __init__(self, on_request: Callable[[str, str], None]) -> None:
        self._on_request = on_request
        self._buffer = bytearray()
        self._state = "head"
        self._remaining = 0  # body or chunk bytes still to skip (chunks: their CRLF included)

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while self._step():
            pass

    def _step(self) -> bool:
        """Consume what the buffer allows of the current state; False when more bytes are needed."""
        if self._state == "head":
            while self._buffer.startswith(b"\r\n"):  # stray CRLF between requests (RFC 9112 allows it)
                del self._buffer[:2]
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return False
            head = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
            del self._buffer[:end + 4]
            self._start(head)
            return True
        if self._state in ("body", "chunk_data"):
            taken = min(self._remaining, len(self._buffer))
            del self._buffer[:taken]
            self._remaining -= taken
            if self._remaining:
                return False
            self._state = "head" if self._state == "body" else "chunk_size"
            return True
        end = self._buffer.find(b"\r\n")  # chunk_size or trailers: line by line
        if end < 0:
            return False
        line = bytes(self._buffer[:end])
        del self._buffer[:end + 2]
        if self._state == "chunk_size":
            size = int(line.split(b";")[0].strip() or b"0", 16)
            self._state, self._remaining = ("trailers", 0) if size == 0 else ("chunk_data", size + 2)
        elif not line:  # the empty line after the trailers ends the request
            self._state = "head"
        return True

    def _start(self, head: list[str]) -> None:
        method, target = (head[0].split(" ") + ["", ""])[:2]
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self._on_request(method, target)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = "chunk_size"
        elif int(headers.get("content-length", "0") or 0) > 0:
            self._state, self._remaining = "body", int(headers["content-length"])


# ---- the proxy (in its own process) ------------------------------------------------------------

class _ProxyServer:
    """asyncio TCP proxy to 127.0.0.1:upstream_port with a one-way delay per chunk."""

    def __init__(self, upstream_port: int, delay: float, counter: RequestCounter,
                 handshake_round_trips: int) -> None:
        self.upstream_port = upstream_port
        self.delay = delay  # read per chunk: a change applies to bytes received from then on
        self.counter = counter
        self.handshake_round_trips = handshake_round_trips
        self.open: set[asyncio.Task] = set()  # asyncio keeps only weak references to tasks

    async def serve(self) -> asyncio.Server:
        return await asyncio.start_server(self._connection, "127.0.0.1", 0)

    async def _connection(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        self.open.add(task)  # type: ignore[arg-type]
        try:
            await self._forward(client_reader, client_writer, loop.time())
        finally:
            self.open.discard(task)  # type: ignore[arg-type]

    async def _forward(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
                       accepted: float) -> None:
        # A real link costs a round trip (SYN, SYN-ACK) before the first request bytes can leave (if charged).
        not_before = accepted + 2 * self.delay * self.handshake_round_trips
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return
        self.counter.record_connection()
        parser = HttpRequestStream(self.counter.record)
        writers = (client_writer, upstream_writer)
        await asyncio.gather(self._pump(client_reader, upstream_writer, parser.feed, not_before, writers),
                             self._pump(upstream_reader, client_writer, None, 0.0, writers))
        for writer in writers:
            writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    observe: Callable[[bytes], None] | None, not_before: float,
                    writers: tuple[asyncio.StreamWriter, ...]) -> None:
        """Read chunks as they come; a second task delivers each at its due time, in order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        deliverer = asyncio.create_task(self._deliver(queue, writer, writers))
        while True:
            try:
                chunk = await reader.read(CHUNK_BYTES)
            except (ConnectionError, OSError):
                chunk = b""
            if chunk and observe is not None:
                observe(chunk)
            queue.put_nowait((max(loop.time(), not_before) + self.delay, chunk))
            if not chunk:
                break
        await deliverer

    @staticmethod
    async def _deliver(queue: asyncio.Queue, writer: asyncio.StreamWriter,
                       writers: tuple[asyncio.StreamWriter, ...]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, chunk = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                if not chunk:  # the sender finished: pass the half-close on
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(chunk)
                await writer.drain()
            except (ConnectionError, OSError, RuntimeError):
                for other in writers:  # one side is gone: end the connection both ways
                    other.transport.abort()
                return


def _child_main(upstream_port: int, delay: float, handshake_round_trips: int) -> None:
    """The proxy process: prints its port, then answers one JSON command per stdin line until EOF."""
    counter = RequestCounter()
    proxy = _ProxyServer(upstream_port, delay, counter, handshake_round_trips)
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(proxy.serve())
    print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)

    def commands() -> None:
        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            if op == "delay":
                proxy.delay = float(command["value"])  # one attribute store: atomic, seen by the next chunk
                reply: object = None
            elif op == "requests":
                reply = [list(r) for r in counter.requests(command.get("since", 0))]
            elif op == "position":
                reply = counter.position()
            elif op == "connections":
                reply = counter.connections()
            elif op == "open":
                reply = len(proxy.open)
            elif op == "reset":
                counter.reset()
                reply = None
            else:
                reply = {"error": f"unknown op {op!r}"}
            print(json.dumps({"reply": reply}), flush=True)
        loop.call_soon_threadsafe(loop.stop)

    threading.Thread(target=commands, daemon=True).start()
    loop.run_forever()
    os._exit(0)  # nothing here outlives the process: connections still open just end with it


# ---- the handle (in the test's or benchmark's process) ---------------------------------------

class _RemoteCounter(CounterView):
    """The proxy process's counter, asked over its stdin/stdout."""

    def __init__(self, call: Callable[..., object]) -> None:
        self._call = call

    def requests(self, since: int = 0) -> list[Request]:
        return [Request(*r) for r in self._call("requests", since=since)]  # type: ignore[union-attr]

    def position(self) -> int:
        return int(self._call("position"))  # type: ignore[arg-type]

    def reset(self) -> None:
        self._call("reset")

    def connections(self) -> int:
        return int(self._call("connections"))  # type: ignore[arg-type]


class DelayProxy:
    """A delaying, counting TCP proxy to 127.0.0.1:`upstream_port`, on a free port of 127.0.0.1.

    `with DelayProxy(moto_port, S3_STANDARD) as proxy:` ... `proxy.endpoint`, `proxy.counter`;
    `proxy.delay = S3_EXPRESS` switches the preset for bytes received from then on.
    """

    def __init__(self, upstream_port: int, one_way_delay_s: float = 0.0, handshake_round_trips: int = 0) -> None:
        self.upstream_port = upstream_port
        self._delay = one_way_delay_s
        self.handshake_round_trips = handshake_round_trips
        self.port: int | None = None
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()  # one command and its reply at a time
        self.counter: CounterView = _RemoteCounter(self._call)

    @property
    def endpoint(self) -> str:
        if self.port is None:
            raise RuntimeError("proxy not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def delay(self) -> float:
        return self._delay

    @delay.setter
    def delay(self, one_way_delay_s: float) -> None:
        self._delay = one_way_delay_s
        if self._proc is not None:
            self._call("delay", value=one_way_delay_s)

    def start(self) -> "DelayProxy":
        args = [str(self.upstream_port), str(self._delay), str(self.handshake_round_trips)]
        self._proc = subprocess.Popen([sys.executable, __file__, *args], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
        first = self._proc.stdout.readline()  # type: ignore[union-attr]
        if not first:
            self._proc.kill()
            raise RuntimeError("delay proxy did not start")
        self.port = json.loads(first)["port"]
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.stdin.close()  # type: ignore[union-attr]
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]

    def open_connections(self) -> int:
        """Connections the proxy is forwarding now (for debugging a client that leaks them)."""
        return int(self._call("open"))  # type: ignore[arg-type]

    def _call(self, op: str, **args: object) -> object:
        if self._proc is None:
            raise RuntimeError("proxy not started")
        with self._lock:
            self._proc.stdin.write(json.dumps({"op": op, **args}) + "\n")  # type: ignore[union-attr]
            self._proc.stdin.flush()  # type: ignore[union-attr]
            line = self._proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError("delay proxy exited")
        return json.loads(line)["reply"]

    def __enter__(self) -> "DelayProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    _child_main(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]))
