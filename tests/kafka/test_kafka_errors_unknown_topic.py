"""What unmodified Kafka clients (kafka-python, confluent-kafka, aiokafka) see on producing to an unknown
topic: with auto.create.topics.enable off, UNKNOWN_TOPIC_OR_PARTITION within a short client timeout, and
nothing is created; at Kafka's default (on), the record is delivered to the topic its Metadata request
created with num.partitions partitions. Each client's way of reporting the error is in
tests/kafka/client_errors.py.
"""

from __future__ import annotations

import time

import httpx

from tests.http import conftest as http_fixtures
from tests.kafka import client_errors
from tests.patience import STUCK_S

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback
client = client_errors.client  # the fixture: each test runs once per client

# ---- unknown topic -----------------------------------------------------------------------------------


def test_produce_to_unknown_topic_fails_and_creates_nothing(start_server, client) -> None:
    server = start_server(auto_create_topics_enable=False)
    topic = f"missing-{client.name}"
    started = time.monotonic()
    client.check(client.unknown_topic(server.bootstrap, topic), "UNKNOWN_TOPIC_OR_PARTITION")
    assert time.monotonic() - started < 10
    assert httpx.get(f"{server.url}/v1/topics/{topic}", timeout=STUCK_S).status_code == 404  # not created
    assert httpx.get(f"{server.url}/v1/topics", timeout=STUCK_S).json()["topics"] == []


def test_produce_to_unknown_topic_creates_it_by_default(start_server, client) -> None:
    server = start_server(num_partitions=2)
    topic = f"made-{client.name}"
    producer = client.producer(server.bootstrap)
    try:
        assert producer.send(topic, b"v") == 0
    finally:
        producer.close()
    detail = httpx.get(f"{server.url}/v1/topics/{topic}", timeout=STUCK_S).json()
    assert len(detail["partitions"]) == 2 and sum(p["log_end_offset"] for p in detail["partitions"]) == 1
