"""A consumer-protocol member (`group.protocol=consumer`) asking to join a group that has classic members: Kafka 4
would upgrade the group online; lakelog refuses with GROUP_ID_NOT_FOUND and a message that says why and what to
do, and the node logs the refusal. The classic member keeps reading; once it has left, the same group id takes
the consumer-protocol member, which reads from the offsets the classic one committed. Logs scanned at the end."""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError

from lakelog.kafka_api.errors import CODES
from lakelog.kafka_api.messages import ConsumerGroupHeartbeatRequest
from tests.http.conftest import ThreadServer, start_server  # noqa: F401  (the fixture)
from tests.kafka.raw_calls import call
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

TOPIC, GROUP = "upgrading", "old-and-new"


@pytest.fixture
def server(start_server: Any) -> ThreadServer:  # noqa: F811
    server = start_server(group_consumer_heartbeat_interval_ms=300)
    response = httpx.post(f"{server.url}/v1/topics", json={"name": TOPIC, "partitions": 2}, timeout=10)
    assert response.status_code == 201, response.text
    produce(server, 0, 20)
    return server


def produce(server: ThreadServer, start: int, count: int) -> None:
    records = [{"value": str(i), "partition": i % 2} for i in range(start, start + count)]
    response = httpx.post(f"{server.url}/v1/topics/{TOPIC}/records", json={"records": records}, timeout=30)
    assert response.status_code == 200, response.text


def read(consumer: Consumer, count: int, seen: list[int]) -> None:
    deadline = time.monotonic() + STUCK_S
    while len(seen) < count:
        assert time.monotonic() < deadline, f"read {len(seen)} of {count}"
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            seen.append(int(message.value()))
            consumer.commit(message=message, asynchronous=False)


def test_a_consumer_protocol_member_is_refused_by_a_classic_group_clearly(server: ThreadServer,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    classic = Consumer({"bootstrap.servers": server.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                        "enable.auto.commit": False, "session.timeout.ms": 6000})
    classic.subscribe([TOPIC])
    seen: list[int] = []
    read(classic, 20, seen)

    with caplog.at_level(logging.WARNING, logger="lakelog.platform.groups.consumer_group"):
        answer = call(server.bootstrap, ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id="new-one", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30_000, subscribed_topic_names=[TOPIC], subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[]), 1)
    assert answer.error_code == CODES["GROUP_ID_NOT_FOUND"]
    assert "classic-protocol members" in answer.error_message and "does not upgrade" in answer.error_message
    assert "group.protocol=classic" in answer.error_message
    assert any("refused" in r.getMessage() and GROUP in r.getMessage() for r in caplog.records)

    newer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
    newer.subscribe([TOPIC])
    try:
        deadline = time.monotonic() + STUCK_S
        error = None
        while error is None:  # librdkafka hands the refusal to the application
            assert time.monotonic() < deadline, "the refusal never reached the application"
            message = newer.poll(0.1)
            if message is not None and message.error() is not None:
                error = message.error()
        # librdkafka makes GROUP_ID_NOT_FOUND in ConsumerGroupHeartbeat fatal, as against Kafka with its
        # migration policy disabled (Java's consumer shows the answer's message too)
        assert error.code() == KafkaError._FATAL, error
        assert "group id does not exist" in error.str(), error
        assert newer.assignment() == []
    finally:
        newer.close()
    produce(server, 20, 10)
    read(classic, 30, seen)  # the classic member is undisturbed
    classic.close()  # leaves: the group id is free for the consumer protocol
    produce(server, 30, 10)
    latest = Consumer({"bootstrap.servers": server.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    latest.subscribe([TOPIC])
    fresh: list[int] = []
    try:
        read(latest, 10, fresh)
    finally:
        latest.close()
    assert sorted(fresh) == list(range(30, 40))  # from the offsets the classic member committed
    assert sorted(seen) == list(range(30))
    assert_topic_intact(server.root, TOPIC)
