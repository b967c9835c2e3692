"""Unmodified Kafka clients on lakelog's Kafka listener, each end to end: create a topic with the
client's admin, produce keyed records (acks=all, idempotent) with headers and timestamps, consume them in
a group, commit, restart the consumer and resume from the commit. The same topics, partitions, offsets
and groups as the HTTP API."""

from __future__ import annotations

import time

import httpx
import pytest
from kafka.partitioner.default import murmur2

from tests.http.conftest import start_server  # noqa: F401  (the fixture)
from tests.kafka.kafka_clients import CLIENTS, Received
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

PARTITIONS = 3


def java_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record (the Java client's), from kafka-python."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def records(prefix: str, count: int) -> list:
    now = int(time.time() * 1000)
    return [(f"{prefix}-key-{i}".encode(), f"{prefix}-value-{i}".encode(), [("trace", f"t{i}".encode())],
             now - 10_000 + i) for i in range(count)]


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
def test_produce_consume_commit_resume(start_server, client) -> None:  # noqa: F811
    server = start_server()
    topic, group = f"orders-{client.name}", f"billing-{client.name}"
    client.create_topic(server.bootstrap, topic, PARTITIONS)
    assert len(httpx.get(f"{server.url}/v1/topics/{topic}", timeout=STUCK_S).json()["partitions"]) == PARTITIONS

    first = records("a", 30)
    placed = client.produce(server.bootstrap, topic, first)
    assert [p for p, _ in placed] == [java_partition(k, PARTITIONS) for k, _, _, _ in first]
    by_http = httpx.post(f"{server.url}/v1/topics/{topic}/records",
                         json={"records": [{"key": k.decode(), "value": "x"} for k, _, _, _ in first[:10]]},
                         timeout=STUCK_S).json()
    assert [o["partition"] for o in by_http["offsets"]] == [p for p, _ in placed[:10]]  # the same partitioner

    got = client.consume(server.bootstrap, topic, group, count=40)
    ours = {r.key: r for r in got if r.value != b"x"}
    assert len(got) == 40 and len(ours) == 30
    for (key, value, headers, timestamp), (partition, offset) in zip(first, placed):
        assert ours[key] == Received(partition, offset, key, value, headers, timestamp)

    later = records("b", 12)
    client.produce(server.bootstrap, topic, later)
    resumed = client.consume(server.bootstrap, topic, group, count=12)
    assert sorted(r.key for r in resumed) == sorted(k for k, _, _, _ in later)  # from the commit, nothing again

    committed = httpx.get(f"{server.url}/v1/groups/{group}", timeout=STUCK_S).json()
    assert sum(o["offset"] for o in committed["offsets"]) == 30 + 10 + 12
    assert_topic_intact(server.root, topic)


def test_kafka_produced_records_read_over_http_at_their_offsets(start_server) -> None:  # noqa: F811
    server = start_server()
    httpx.post(f"{server.url}/v1/topics", json={"name": "events", "partitions": PARTITIONS}, timeout=STUCK_S).raise_for_status()
    sent = records("k", 12)
    placed = CLIENTS[1].produce(server.bootstrap, "events", sent)  # confluent-kafka, murmur2
    for (key, value, headers, timestamp), (partition, offset) in zip(sent, placed):
        fetched = httpx.get(f"{server.url}/v1/topics/events/partitions/{partition}/records",
                            params={"offset": offset, "max_records": 1}, timeout=STUCK_S).json()["records"][0]
        assert (fetched["offset"], fetched["key"], fetched["value"], fetched["timestamp"]) == (
            offset, key.decode(), value.decode(), timestamp)
        assert [(h["key"], h["value"].encode()) for h in fetched["headers"]] == headers


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_produce_and_fetch(start_server, codec: str) -> None:  # noqa: F811
    """The producer compresses its batches; the topic's compression.type compresses fetched ones."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    server = start_server()
    httpx.post(f"{server.url}/v1/topics", json={"name": "z", "config": {"compression.type": codec}}, timeout=STUCK_S).raise_for_status()
    producer = Producer({"bootstrap.servers": server.bootstrap, "compression.type": codec, "linger.ms": 20})
    for i in range(200):
        producer.produce("z", key=b"k%d" % i, value=b"value %d " % i * 20)
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition("z", 0, 0)])
    got = []
    deadline = time.monotonic() + STUCK_S
    while len(got) < 200 and time.monotonic() < deadline:
        got += [m for m in consumer.consume(200, 0.5) if not m.error()]
    consumer.close()
    assert [(m.offset(), m.value()) for m in got] == [(i, b"value %d " % i * 20) for i in range(200)]
