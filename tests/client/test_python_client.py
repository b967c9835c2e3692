"""lakelog.client against a real server over a socket: round trip, idempotent retries, a rebalancing group
of three, a server restart under a consumer, admin."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Callable

import pyarrow as pa
import pytest
from tests.http.conftest import ThreadServer as Server
from log_check import assert_topic_intact
from tests.patience import STUCK_S

from lakelog.client import (
    OFFSET_BEGINNING,
    AdminClient,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

FAST_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 200, "fetch.wait.max.ms": 200}


def consume(consumer: Consumer, count: int, timeout_s: float = 20) -> list[Message]:
    out: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        out.extend(consumer.consume(count - len(out), 0.5))
    return out


def test_round_trip_with_delivery_callbacks(start_server: Callable[..., Server]) -> None:
    server = start_server()
    admin = AdminClient(server.url)
    admin.create_topic("orders", 3)
    delivered: list[tuple[KafkaError | None, Message]] = []
    producer = Producer(server.url, {"linger.ms": 5, "batch.size": 2000})
    futures = [producer.produce("orders", f"value-{i}", key=f"key-{i % 7}", headers={"n": str(i)},
                                on_delivery=lambda err, msg: delivered.append((err, msg))) for i in range(300)]
    table = pa.table({"key": [b"bulk"] * 50, "value": [f"bulk-{i}".encode() for i in range(50)]})
    bulk = producer.produce_table("orders", table)
    assert producer.flush(30) == 0
    assert len(delivered) == 300 and all(err is None for err, _ in delivered)
    assert all(msg.offset() >= 0 and msg.partition() in (0, 1, 2) for _, msg in delivered)
    assert [f.result().value() for f in futures] == [f"value-{i}".encode() for i in range(300)]
    by_key = {}
    for _, msg in delivered:  # one key, one partition
        assert by_key.setdefault(msg.key(), msg.partition()) == msg.partition()
    assert len(bulk.result()) == 50
    producer.close()

    consumer = Consumer(server.url, {"group.id": "billing", "auto.offset.reset": "earliest", **FAST_GROUP})
    assigned: list[TopicPartition] = []
    consumer.subscribe(["orders"], on_assign=lambda c, parts: assigned.extend(parts))
    got = consume(consumer, 350)
    assert len(got) == 350
    assert sorted(tp.partition for tp in assigned) == [0, 1, 2]
    values = {m.value() for m in got}
    assert values == {f"value-{i}".encode() for i in range(300)} | {f"bulk-{i}".encode() for i in range(50)}
    first = next(m for m in got if m.value() == b"value-5")
    assert first.key() == b"key-5" and first.headers() == [("n", b"5")] and first.timestamp()[1] > 0
    committed = consumer.commit(asynchronous=False)
    assert committed is not None and sum(tp.offset for tp in committed) == 350
    consumer.close()
    assert sum(tp.offset for tp in admin.list_consumer_group_offsets("billing")) == 350
    assert_topic_intact(server.root, "orders")


class DropFirstAnswer:
    """A TCP proxy in front of the server that closes the first connection instead of passing on the
    server's answer: the request was served, the client never hears it (a lost answer)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.dropped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            drop = not self.dropped.is_set()
            self.dropped.set()
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, drop), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, drop: bool) -> None:
        try:
            while data := source.recv(65536):
                if drop:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the other pump's recv; close() alone would not
                sock.close()
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()


def test_idempotent_retry_does_not_duplicate(start_server: Callable[..., Server]) -> None:
    server = start_server()
    AdminClient(server.url).create_topic("payments", 2)
    proxy = DropFirstAnswer(server.port)
    producer = Producer(f"http://127.0.0.1:{proxy.port}", {"linger.ms": 50, "retry.backoff.ms": 20})
    futures = [producer.produce("payments", f"p{i}", key=f"k{i}") for i in range(5)]
    assert producer.flush(30) == 0
    assert proxy.dropped.is_set()
    first = [(f.result().partition(), f.result().offset()) for f in futures]
    per_partition: dict[int, list[int]] = {}
    for partition, offset in first:
        per_partition.setdefault(partition, []).append(offset)
    assert all(sorted(offsets) == list(range(len(offsets))) for offsets in per_partition.values())
    # The same batch sequence once more, by hand: the server answers the first answer's offsets.
    producer._sequences._next["payments"] = 0
    again = [producer.produce("payments", f"p{i}", key=f"k{i}") for i in range(5)]
    assert producer.flush(30) == 0
    assert [(f.result().partition(), f.result().offset()) for f in again] == first
    producer.close()
    proxy.close()
    described = AdminClient(server.url).describe_topic("payments")
    assert sum(p["log_end_offset"] for p in described["partitions"]) == 5
    assert_topic_intact(server.root, "payments")


def test_three_consumers_rebalance(start_server: Callable[..., Server]) -> None:
    server = start_server()
    admin = AdminClient(server.url)
    admin.create_topic("events", 6)
    total = 1500
    producer = Producer(server.url, {"linger.ms": 5})

    def produce_slowly() -> None:
        for i in range(total):
            producer.produce("events", str(i), key=str(i))
            if i % 100 == 99:
                time.sleep(0.1)
        producer.flush(30)

    seen: list[list[int]] = [[], [], []]
    stop = threading.Event()
    consumers = [Consumer(server.url, {"group.id": "trio", "auto.offset.reset": "earliest",
                                       "partition.assignment.strategy": "cooperative-sticky", **FAST_GROUP})
                 for _ in range(3)]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            consumers[i].subscribe(["events"])
            while not stop.is_set():
                seen[i].extend(int(m.value()) for m in consumers[i].consume(100, 0.2))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    sender = threading.Thread(target=produce_slowly)
    sender.start()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
        time.sleep(0.5)  # members join one by one while records flow: two rebalances
    deadline = time.monotonic() + STUCK_S
    while sum(map(len, seen)) < total and time.monotonic() < deadline and not errors:
        time.sleep(0.1)
    sender.join(30)
    owned = [{tp.key() for tp in c.assignment()} for c in consumers]
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    everything = sorted(v for values in seen for v in values)
    assert everything == list(range(total)), f"{len(everything)} consumed, {len(set(everything))} distinct"
    assert all(owned), owned  # each of the three owns partitions
    assert sorted(tp for part in owned for tp in part) == [("events", p) for p in range(6)]
    described = admin.describe_group("trio")
    assert sorted((a["topic"], a["partition"]) for m in described["members"] for a in m["assignment"]) == \
        [("events", p) for p in range(6)]
    for consumer in consumers:
        consumer.close()
    producer.close()
    assert sum(tp.offset for tp in admin.list_consumer_group_offsets("trio")) == total
    assert_topic_intact(server.root, "events")


def test_consumer_survives_server_restart(start_server: Callable[..., Server], tmp_path: Any) -> None:
    root = str(tmp_path / "restart")
    server = start_server(root)
    AdminClient(server.url).create_topic("ledger", 2)
    with Producer(server.url) as producer:
        for i in range(100):
            producer.produce("ledger", str(i), key=str(i))
    consumer = Consumer(server.url, {"group.id": "books", "auto.offset.reset": "earliest",
                                     "enable.auto.commit": False, **FAST_GROUP})
    consumer.subscribe(["ledger"])
    first_member = consumer._member_id
    committed: dict[int, int] = {}
    deliveries: list[tuple[int, int, int]] = []  # (partition, offset, committed offset at delivery)
    values: set[int] = set()
    restarted = threading.Event()
    failed_commits = 0

    again: list[Server] = []

    def restart() -> None:
        server.stop()
        time.sleep(0.5)
        again.append(start_server(root, server.port))
        restarted.set()

    deadline = time.monotonic() + STUCK_S
    while len(values) < 120 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        deliveries.append((message.partition(), message.offset(), committed.get(message.partition(), 0)))
        values.add(int(message.value()))
        try:
            consumer.commit(message, asynchronous=False)
            committed[message.partition()] = message.offset() + 1
        except KafkaException:
            failed_commits += 1  # the server went away mid-commit: that record may come again
        if len(deliveries) == 40:
            threading.Thread(target=restart).start()
        if restarted.is_set() and len(values) == 100:
            restarted.clear()
            with Producer(server.url) as producer:  # the restarted server, same port
                for i in range(100, 120):
                    producer.produce("ledger", str(i), key=str(i))
    rejoined_as = consumer._member_id
    consumer.close()
    assert rejoined_as not in (None, first_member)  # the restarted server knew nothing of it: it joined again
    assert values == set(range(120))
    assert all(offset >= floor for _, offset, floor in deliveries), "a committed record came again"
    assert len(deliveries) - 120 <= failed_commits  # only records whose commit failed came again
    again[0].settle()  # the last records' table commit, behind the journal's answer
    offsets = assert_topic_intact(root, "ledger")
    assert sum(len(o) for o in offsets.values()) == 120  # the restart lost no acknowledged record


def test_admin_client(start_server: Callable[..., Server]) -> None:
    server = start_server()
    admin = AdminClient(server.url)
    created = admin.create_topic("audit", 2, {"retention.ms": 3_600_000})
    assert created["config"]["retention.ms"] == 3_600_000
    with pytest.raises(KafkaException) as exists:
        admin.create_topic("audit", 2)
    assert exists.value.args[0].code() == "TOPIC_ALREADY_EXISTS" and not exists.value.args[0].retriable()
    assert admin.list_topics() == {"audit": 2}
    assert admin.alter_configs("audit", {"retention.ms": 60_000})["retention.ms"] == 60_000
    assert admin.describe_configs("audit")["retention.ms"] == 60_000
    assert len(admin.create_partitions("audit", 3)["partitions"]) == 3
    with Producer(server.url) as producer:
        for i in range(10):
            producer.produce("audit", str(i), partition=0)
    assert admin.list_offsets("audit", 0, "earliest") == 0 and admin.list_offsets("audit", 0, "latest") == 10

    commits: list[tuple[KafkaError | None, list[TopicPartition]]] = []
    consumer = Consumer(server.url, {"group.id": "auditors", "auto.offset.reset": "earliest",
                                     "on_commit": lambda err, parts: commits.append((err, parts))})
    consumer.assign([TopicPartition("audit", 0, OFFSET_BEGINNING)])
    assert len(consume(consumer, 10)) == 10
    consumer.seek(TopicPartition("audit", 0, 7))
    assert [m.offset() for m in consume(consumer, 3)] == [7, 8, 9]
    assert consumer.commit() is None  # asynchronous, as confluent-kafka's default
    consumer.close()  # waits for the commit in flight
    assert [(err, [(tp.partition, tp.offset) for tp in parts]) for err, parts in commits] == [(None, [(0, 10)])]
    assert admin.list_groups() == {"auditors": "Empty"}
    assert [(tp.partition, tp.offset) for tp in admin.list_consumer_group_offsets("auditors")] == [(0, 10)]
    assert admin.describe_group("auditors")["state"] == "Empty"
    reset = admin.reset_consumer_group_offsets("auditors", "earliest", topics=["audit"])
    assert [(tp.partition, tp.offset) for tp in reset if tp.partition == 0] == [(0, 0)]
    admin.delete_group("auditors")
    assert admin.list_groups() == {}
    with pytest.raises(KafkaException) as gone:
        admin.list_consumer_group_offsets("auditors")
    assert gone.value.args[0].code() == "GROUP_ID_NOT_FOUND"
    admin.delete_topic("audit")
    assert admin.list_topics() == {}
    with pytest.raises(KafkaException) as unknown:
        admin.describe_topic("audit")
    assert unknown.value.args[0].code() == "UNKNOWN_TOPIC_OR_PARTITION"
    admin.close()


def test_api_key(start_server: Callable[..., Server]) -> None:
    server = start_server(api_keys_json='{"admin-secret": "admin"}')
    with pytest.raises(KafkaException) as refused:
        AdminClient(server.url).list_topics()
    assert refused.value.args[0].code() == "SASL_AUTHENTICATION_FAILED"
    admin = AdminClient(server.url, api_key="admin-secret")
    admin.create_topic("secret", 1)
    with Producer(server.url, {"api.key": "admin-secret"}) as producer:
        future = producer.produce("secret", "x")
    assert future.result().offset() == 0


def test_eager_rebalance_with_a_pattern_subscription(start_server: Callable[..., Server]) -> None:
    server = start_server()
    AdminClient(server.url).create_topic("clicks-a", 2)
    AdminClient(server.url).create_topic("clicks-b", 2)
    with Producer(server.url) as producer:
        for i in range(200):
            producer.produce("clicks-a" if i % 2 else "clicks-b", str(i), key=str(i))
    events: list[tuple[int, str, list[tuple[str, int]]]] = []

    def log(i: int, kind: str) -> Callable[[Consumer, list[TopicPartition]], None]:
        return lambda consumer, parts: events.append((i, kind, [tp.key() for tp in parts]))

    config = {"group.id": "clickers", "auto.offset.reset": "earliest", **FAST_GROUP}
    first, second = Consumer(server.url, config), Consumer(server.url, config)
    first.subscribe(["^clicks-.*"], on_assign=log(1, "assign"), on_revoke=log(1, "revoke"))
    got = consume(first, 50)
    second.subscribe(["^clicks-.*"], on_assign=log(2, "assign"), on_revoke=log(2, "revoke"))
    deadline = time.monotonic() + STUCK_S
    while len({int(m.value()) for m in got}) < 200 and time.monotonic() < deadline:
        got.extend(first.consume(100, 0.2))
        got.extend(second.consume(100, 0.2))
    assert {int(m.value()) for m in got} == set(range(200))  # at least once (eager: a few may come twice)
    while len(first.assignment()) != 2 and time.monotonic() < deadline:  # poll() is where changes land
        first.consume(100, 0.2)
        second.consume(100, 0.2)
    assert len(first.assignment()) == len(second.assignment()) == 2
    assert sorted(tp.key() for c in (first, second) for tp in c.assignment()) == \
        [("clicks-a", 0), ("clicks-a", 1), ("clicks-b", 0), ("clicks-b", 1)]
    # Eager, as Kafka: the first member gave up its whole assignment, then got its new one.
    everything = [(t, p) for t in ("clicks-a", "clicks-b") for p in (0, 1)]
    assert (1, "assign", everything) in events and (1, "revoke", everything) in events
    assert [e for e in events if e[0] == 2 and e[1] == "assign"]
    first.close()
    second.close()
