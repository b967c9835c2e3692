"""SIGKILL of `lakelog serve` under load from idempotent confluent-kafka producers, then a restart on the
same HTTP and Kafka ports: the producers reconnect to the same bootstrap address and flush, and every
message whose delivery was reported is in the topic once, at the partition and offset reported;
messages reported failed may be missing but are never there twice.

The clients reach the listener through a proxy that holds every answer back a little, as a network
does: when the server dies, batches it had committed are still unanswered, so the producers send them
again after the restart, and only the server's idempotence (the producer's sequence numbers, recovered
from the log) keeps them from being written twice. Without the delay that window is too short to hit.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import KafkaError, Producer
from deltalake import DeltaTable

from lakelog.platform.journal.objects import RECORDS, decode
from lakelog.platform.storage import Storage
from tests.http.conftest import ProcessServer, fetch_all
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

pytestmark = pytest.mark.slow  # a server subprocess, killed and restarted
TOPIC = "crash"
PARTITIONS = 3
PRODUCERS = 2
ANSWER_DELAY_S = 0.3


class DelayingProxy:
    """A TCP proxy to 127.0.0.1:`target`, in a thread: requests pass at once, every chunk of answers
    `delay_s` later. When the server's side closes (SIGKILL), the answers still held back are dropped
    and the client's connection is closed: they are lost, as they would be on the wire. `hold()` keeps
    every answer back until `release()`."""

    def __init__(self, target: int, delay_s: float) -> None:
        self.target, self.delay_s = target, delay_s
        self.flowing = threading.Event()
        self.flowing.set()
        self._pending: dict[int, int] = {}  # per open connection: answers read from the server, not passed on
        self.loop = asyncio.new_event_loop()
        self.port = 0
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), name="delaying-proxy", daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()
        server.close()

    @property
    def held_chunks(self) -> int:
        """Answers held back on connections still open (a closed one's are dropped, never delivered)."""
        return sum(list(self._pending.values()))  # list(): the proxy's thread may add a connection meanwhile

    def hold(self) -> None:
        self.flowing.clear()

    def release(self) -> None:
        self.flowing.set()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:  # the server is down: the client sees a refused (closed) connection
            client_writer.close()
            return
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        self._pending[id(held)] = 0
        tasks = [asyncio.ensure_future(self._requests(client_reader, server_writer)),
                 asyncio.ensure_future(self._answers(server_reader, held)),
                 asyncio.ensure_future(self._deliver(held, client_writer))]
        await asyncio.wait(tasks[:2], return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:  # either side gone: what is held back is dropped
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        del self._pending[id(held)]
        client_writer.close()
        server_writer.close()

    @staticmethod
    async def _requests(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass

    async def _answers(self, reader: asyncio.StreamReader, held: asyncio.Queue) -> None:
        try:
            while data := await reader.read(1 << 16):
                self._pending[id(held)] += 1
                held.put_nowait((time.monotonic() + self.delay_s, data))
        except ConnectionError:
            pass

    async def _deliver(self, held: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        while True:
            due, data = await held.get()
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            while not self.flowing.is_set():
                await asyncio.sleep(0.01)
            self._pending[id(held)] -= 1
            writer.write(data)
            await writer.drain()


class Load:
    """One idempotent producer in a thread, producing distinct keyed values until told to stop, then
    flushing; each value's delivery report is kept."""

    def __init__(self, bootstrap: str, n: int) -> None:
        self.n = n
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "message.timeout.ms": 60000, "linger.ms": 5, "client.id": f"crash-{n}"})
        self.delivered: dict[str, tuple[int, int]] = {}  # value -> (partition, offset)
        self.failed: dict[str, KafkaError] = {}
        self.fatal: list[KafkaError] = []
        self.produced = 0
        self.unflushed = -1
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name=f"producer-{n}")

    def report(self, err: KafkaError | None, msg: Any) -> None:
        value = msg.value().decode()
        if err is None:
            self.delivered[value] = (msg.partition(), msg.offset())
        else:
            self.failed[value] = err
            if err.fatal():
                self.fatal.append(err)

    def run(self) -> None:
        while not self.stop.is_set():
            value = f"p{self.n}-{self.produced}"
            try:
                self.producer.produce(TOPIC, key=value.encode(), value=value.encode(), on_delivery=self.report)
                self.produced += 1
            except BufferError:  # the queue is full while the server is down: wait for room
                self.producer.poll(0.05)
                continue
            self.producer.poll(0)
            if self.produced % 50 == 0:
                time.sleep(0.01)  # a steady stream (about 5000 a second), not one huge burst
        self.unflushed = self.producer.flush(60)


def committed_count(server: ProcessServer) -> int:
    response = httpx.get(f"{server.url}/v1/topics/{TOPIC}", timeout=STUCK_S)
    assert response.status_code == 200, response.text
    return sum(p["log_end_offset"] for p in response.json()["partitions"])


def committed_values(root: str) -> set[str]:
    """The values acknowledged so far: in the topic's table (read from the data files its snapshot names), or
    in a node journal object still waiting for its table commit (a restart replays those into the table)."""
    store = Storage.open(root)
    uri = store.uri("topics", TOPIC)
    table = DeltaTable(uri, storage_options=store.delta_options())
    values: set[str] = set()
    for path in pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist():
        with store.open_input(f"{uri}/{path}") as source:
            values.update(v.decode() for v in pq.read_table(source, columns=["value"]).column("value").to_pylist())
    for path in store.list_tree(store.uri("_journal", "gens")):
        if os.path.basename(path).startswith("_tmp"):
            continue
        written = decode(store.read_bytes(path))
        if written.kind == RECORDS and TOPIC in written.topics():
            values.update(v.decode() for v in written.topic_records(TOPIC).column("value").to_pylist())
    return values


def test_sigkill_under_idempotent_confluent_producers(tmp_path: Any) -> None:
    root = str(tmp_path / "root")
    first = ProcessServer(root)  # its ports are chosen here; the proxy forwards to its Kafka port
    proxy = DelayingProxy(first.kafka_port, ANSWER_DELAY_S)
    env = {"LAKELOG_KAFKA_PORT": str(first.kafka_port), "LAKELOG_KAFKA_ADVERTISE": f"127.0.0.1:{proxy.port}"}
    server = ProcessServer(root, env, port=first.port).start()
    restarted: ProcessServer | None = None
    loads = [Load(f"127.0.0.1:{proxy.port}", n) for n in range(PRODUCERS)]
    try:
        response = httpx.post(f"{server.url}/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}, timeout=STUCK_S)
        assert response.status_code == 201, response.text
        for load in loads:
            load.thread.start()
        deadline = time.monotonic() + STUCK_S
        while sum(len(load.delivered) for load in loads) < 3000:
            assert time.monotonic() < deadline, "the load did not get going"
            time.sleep(0.02)
        # Kill mid-stream with batches committed whose answers are still on the way: from the hold on, no
        # answer reaches a producer, so an answer the proxy holds is a committed batch unanswered at the kill
        # (on a busy machine, racing the proxy's delay instead let every answer through first).
        proxy.hold()
        while proxy.held_chunks == 0 or committed_count(server) <= sum(len(load.delivered) for load in loads):
            assert time.monotonic() < deadline, "no answer to a committed batch held back"
            time.sleep(0.02)
        server.kill()
        acked_before_kill = {value for load in loads for value in load.delivered}
        proxy.release()  # the restarted server's answers flow again
        unanswered = committed_values(root) - acked_before_kill  # committed, their answers lost
        restarted = ProcessServer(root, env, port=server.port).start()  # the same HTTP and Kafka ports
        deadline = time.monotonic() + STUCK_S
        while not all(set(load.delivered) - acked_before_kill for load in loads):  # each is writing again
            assert time.monotonic() < deadline, "the producers did not resume after the restart"
            time.sleep(0.05)
        time.sleep(0.5)
        for load in loads:
            load.stop.set()
        for load in loads:
            load.thread.join(70)
            assert not load.thread.is_alive() and load.unflushed == 0
        assert not [err for load in loads for err in load.fatal], "an idempotent producer failed fatally"
        with restarted.client() as c:
            stored = {p: fetch_all(c, TOPIC, p) for p in range(PARTITIONS)}
    finally:
        for load in loads:
            load.stop.set()
        server.terminate()
        if restarted is not None:
            restarted.terminate()
        proxy.stop()

    delivered = {value: where for load in loads for value, where in load.delivered.items()}
    failed = {value for load in loads for value in load.failed}
    assert len(delivered) + len(failed) == sum(load.produced for load in loads)  # every message reported
    assert unanswered, "no committed batch lost its answer at the kill: the test did not test idempotence"
    found: dict[str, tuple[int, int]] = {}
    counts: Counter[str] = Counter()
    for partition, records in stored.items():
        for record in records:
            counts[record["value"]] += 1
            found[record["value"]] = (partition, record["offset"])
    twice = [value for value, n in counts.items() if n > 1]
    assert not twice, f"{len(twice)} messages stored more than once, e.g. {twice[:5]}"
    assert set(found) <= set(delivered) | failed, "records nobody produced"
    missing = [value for value in delivered if value not in found]
    assert not missing, f"{len(missing)} delivered messages missing, e.g. {missing[:5]}"
    moved = [value for value, where in delivered.items() if found[value] != where]
    assert not moved, f"delivered messages not at their reported offsets, e.g. {moved[:5]}"
    assert unanswered <= set(delivered), "a batch committed before the kill was reported failed"
    offsets = assert_topic_intact(root, TOPIC)
    assert sum(len(o) for o in offsets.values()) == len(found)
