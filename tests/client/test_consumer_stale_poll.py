"""A poll the consumer gave up on that reaches the coordinator late (a relaying node stalled, a busy
coordinator) must change nothing: its `after` is old, so it once rolled back the answer the consumer did
get, took that answer's number for its own (lost) answer, and the consumer's next poll started after
records no one was handed (the chaos test's consumer read a partition up to 383, then from 387).

A proxy in front of the server stands for the stalled node: it takes one poll, drops the consumer's
connection (the consumer asks the server directly), and hands the poll to the server only after the
consumer received the answer to its next one."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from typing import Callable

from tests.http.conftest import ThreadServer as Server
from tests.patience import STUCK_S

from lakelog.client import AdminClient, Consumer, Message, Producer

GROUP_CONFIG = {"group.id": "late", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "session.timeout.ms": 6000, "heartbeat.interval.ms": 200, "fetch.wait.max.ms": 200}


class StallingProxy:
    """Relays connections to the server; once armed, the next poll's request is kept (the consumer's
    connection dropped) until `deliver_late` sends it to the server and reads the answer nobody gets."""

    def __init__(self, server_port: int) -> None:
        self.server_port = server_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.armed = threading.Event()
        self.kept: bytes | None = None
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.server_port))
            threading.Thread(target=self._pump, args=(downstream, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, downstream, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, from_client: bool) -> None:
        try:
            while data := source.recv(65536):
                if from_client and self.armed.is_set() and b"/records?" in data:
                    self.armed.clear()
                    self.kept = data  # a GET: the whole request is in one segment on the loopback
                    break
                target.sendall(data)
        except OSError:
            pass
        for end in (source, target):
            end.close()

    def deliver_late(self) -> None:
        assert self.kept is not None, "no poll was kept"
        with socket.create_connection(("127.0.0.1", self.server_port), timeout=STUCK_S) as conn:
            conn.sendall(self.kept)
            answer = http.client.HTTPResponse(conn)
            answer.begin()
            answer.read()  # the poll ran on the coordinator; its answer goes nowhere

    def close(self) -> None:
        self.listener.close()


def consume(consumer: Consumer, count: int) -> list[Message]:
    out: list[Message] = []
    deadline = time.monotonic() + STUCK_S
    while len(out) < count and time.monotonic() < deadline:
        out.extend(consumer.consume(count - len(out), 0.5))
    return out


def test_a_poll_delivered_late_never_makes_the_consumer_skip(start_server: Callable[..., Server]) -> None:
    server = start_server()
    AdminClient(server.url).create_topic("t", 1)
    producer = Producer(server.url, {"linger.ms": 0})
    proxy = StallingProxy(server.port)
    consumer = Consumer(f"{proxy.url},{server.url}", GROUP_CONFIG)  # through the proxy first
    try:
        consumer.subscribe(["t"])
        for i in range(3):
            producer.produce("t", f"a{i}")
        producer.flush(STUCK_S)
        proxy.armed.set()  # the next poll stalls at the proxy; the consumer asks the server itself
        assert [m.value() for m in consume(consumer, 3)] == [b"a0", b"a1", b"a2"]
        for i in range(3):
            producer.produce("t", f"b{i}")
        producer.flush(STUCK_S)
        proxy.deliver_late()
        assert [m.value() for m in consume(consumer, 3)] == [b"b0", b"b1", b"b2"], \
            "records after the answer the consumer got were skipped"
    finally:
        consumer.close()
        producer.close()
        proxy.close()
