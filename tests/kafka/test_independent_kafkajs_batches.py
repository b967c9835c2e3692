"""What KafkaJS (npm, pinned in tests/kafka/js/package-lock.json; it shares no code with lakelog or with its
Python dependencies) is told about the record batches it writes, through tests/kafka/js/produce.js: a send's
answer names the partition's log start offset (Produce v5+, what ListOffsets earliest answers).
"""

from __future__ import annotations

from typing import Any

from tests.http import conftest as http_fixtures
from tests.kafka import independent_clients
from tests.kafka.independent_clients import Served, create_topic, kafkajs, topic_detail

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback
node = independent_clients.node
served = independent_clients.served


def send(node: str, served: Served, topic: str, batches: list[list[dict[str, Any]]],
         idempotent: bool = True) -> list[list[dict[str, Any]]]:
    return kafkajs(node, "produce.js", served, topic=topic, batches=batches, idempotent=idempotent)["sent"]


def records(n: int, prefix: str) -> list[dict[str, Any]]:
    return [{"key": f"{prefix}{i}", "value": f"{prefix}-{i}", "partition": 0} for i in range(n)]


def test_kafkajs_send_is_told_the_log_start_offset(node: str, served: Served) -> None:
    topic = "kafkajs-log-start"
    create_topic(served.http, topic, 1)
    (first,) = send(node, served, topic, [records(5, "a")])
    assert first == [{"partition": 0, "baseOffset": 0, "logStartOffset": 0}]

    # DeleteRecords below offset 3 (KafkaJS's admin; it needs the topic's metadata loaded first)
    loaded, deleted = kafkajs(node, "admin.js", served, calls=[
        {"call": "fetchTopicMetadata", "args": {"topics": [topic]}},
        {"call": "deleteTopicRecords", "args": {"topic": topic, "partitions": [{"partition": 0, "offset": "3"}]}}],
    )["results"]
    assert loaded["ok"] and deleted["ok"], (loaded, deleted)
    assert topic_detail(served.http, topic)["partitions"][0]["log_start_offset"] == 3

    (second,) = send(node, served, topic, [records(2, "b")], idempotent=False)
    assert second == [{"partition": 0, "baseOffset": 5, "logStartOffset": 3}]

