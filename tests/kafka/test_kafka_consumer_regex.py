"""KIP-848's regex subscriptions with an unmodified confluent-kafka (`group.protocol=consumer`): a consumer
subscribed to `^orders-.*` (sent as ConsumerGroupHeartbeat's SubscribedTopicRegex, evaluated by the server)
is assigned the partitions of the matching topics only, then of a matching topic created after it subscribed,
and reads their records, each once. The topics' logs are scanned at the end."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer

from lakelog.kafka_api.messages import ConsumerGroupDescribeRequest
from tests.http.conftest import ThreadServer, start_server  # noqa: F401  (the fixture)
from tests.kafka.raw_calls import call
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

GROUP = "regex-readers"
TOPICS = {"orders-eu": 2, "orders-us": 1, "payments": 2, "xorders-1": 1}  # the last two do not match


@pytest.fixture
def server(start_server: Any) -> ThreadServer:  # noqa: F811
    server = start_server(group_consumer_heartbeat_interval_ms=300)
    for name, partitions in TOPICS.items():
        create(server, name, partitions)
    return server


def create(server: ThreadServer, name: str, partitions: int) -> None:
    response = httpx.post(f"{server.url}/v1/topics", json={"name": name, "partitions": partitions}, timeout=10)
    assert response.status_code == 201, response.text


def produce(server: ThreadServer, topic: str, count: int) -> None:
    records = [{"key": f"k{i}", "value": f"{topic}:{i}"} for i in range(count)]
    response = httpx.post(f"{server.url}/v1/topics/{topic}/records", json={"records": records}, timeout=30)
    assert response.status_code == 200, response.text


def read_until(consumer: Consumer, wanted: set[tuple[str, int]], seen: list[str], count: int) -> None:
    """Poll until the assignment is `wanted` and `count` records were read."""
    deadline = time.monotonic() + STUCK_S
    while {(tp.topic, tp.partition) for tp in consumer.assignment()} != wanted or len(seen) < count:
        assert time.monotonic() < deadline, \
            f"stuck: assigned {sorted((tp.topic, tp.partition) for tp in consumer.assignment())}, read {len(seen)}"
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            seen.append(message.value().decode())


def test_a_regex_subscription_follows_matching_topics(server: ThreadServer) -> None:
    for topic in TOPICS:
        produce(server, topic, 10)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
    try:
        consumer.subscribe(["^orders-.*"])
        seen: list[str] = []
        read_until(consumer, {("orders-eu", 0), ("orders-eu", 1), ("orders-us", 0)}, seen, 20)
        assert sorted(seen) == sorted(f"{t}:{i}" for t in ("orders-eu", "orders-us") for i in range(10))

        create(server, "orders-apac", 3)  # after the subscription: the server's next evaluation assigns it
        produce(server, "orders-apac", 12)
        read_until(consumer, {("orders-eu", 0), ("orders-eu", 1), ("orders-us", 0)} |
                   {("orders-apac", p) for p in range(3)}, seen, 32)
        assert sorted(seen[20:]) == sorted(f"orders-apac:{i}" for i in range(12))
        (member,) = httpx.get(f"{server.url}/v1/groups/{GROUP}", timeout=10).json()["members"]
        assert member["pattern"] == "(^orders-.*)" and member["topics"] == []  # librdkafka wraps each regex
        (group,) = call(server.bootstrap, ConsumerGroupDescribeRequest(
            group_ids=[GROUP], include_authorized_operations=False), 1).groups
        (described,) = group.members
        assert described.subscribed_topic_regex == "(^orders-.*)"
        assert sorted((t.topic_name, p) for t in described.assignment.topic_partitions for p in t.partitions) == \
            sorted([("orders-eu", 0), ("orders-eu", 1), ("orders-us", 0)] + [("orders-apac", p) for p in range(3)])
    finally:
        consumer.close()
    for topic in [*TOPICS, "orders-apac"]:
        assert_topic_intact(server.root, topic)
