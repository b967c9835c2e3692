"""Topic configs Kafka 3.9 deprecates but still accepts (issue 40: librdkafka's test 0092 creates a topic with
`message.format.version`, KafkaJS's tests with `message.timestamp.difference.max.ms`; lakelog refused both
with INVALID_CONFIG). They are taken at CreateTopics, AlterConfigs and IncrementalAlterConfigs (and the HTTP
topic create), DescribeConfigs shows what was set, and each has Kafka's effect: the difference bounds
timestamps both ways where before/after.max.ms are left at their defaults, the format version and
down-conversion change nothing here, with a warning in the log."""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tests.http.conftest import ThreadServer, start_server  # noqa: F401  (the fixture)
from tests.patience import STUCK_S

HOUR_MS = 3_600_000


@pytest.fixture
def server(start_server: Any) -> ThreadServer:  # noqa: F811
    return start_server()


def described(admin: AdminClient, topic: str) -> dict[str, Any]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=STUCK_S)


def delivered(server: ThreadServer, topic: str, timestamp_ms: int) -> Any:
    """The error of producing one record stamped `timestamp_ms` (None: written)."""
    reports: list[Any] = []
    producer = Producer({"bootstrap.servers": server.bootstrap, "retries": 0})
    producer.produce(topic, value=b"v", timestamp=timestamp_ms, on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(STUCK_S) == 0
    return reports[0]


def test_create_alter_and_describe_the_deprecated_configs(server: ThreadServer,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    config = {"message.format.version": "0.10.0", "message.timestamp.difference.max.ms": str(HOUR_MS),
              "message.downconversion.enable": "false"}
    with caplog.at_level(logging.WARNING, logger="lakelog"):
        admin.create_topics([NewTopic("legacy", 1, config=config)])["legacy"].result(timeout=STUCK_S)
    assert any("message.format.version" in r.getMessage() and "legacy" in r.getMessage() for r in caplog.records)
    entries = described(admin, "legacy")
    assert {name: entries[name].value for name in config} == config
    assert not any(entries[name].is_default for name in config)

    now = int(time.time() * 1000)  # the difference bounds timestamps both ways, as Kafka's LogConfig maps it
    assert delivered(server, "legacy", now) is None
    assert delivered(server, "legacy", now - 2 * HOUR_MS).code() == KafkaError.INVALID_TIMESTAMP
    assert delivered(server, "legacy", now + 2 * HOUR_MS).code() == KafkaError.INVALID_TIMESTAMP

    # AlterConfigs replaces the whole config; IncrementalAlterConfigs sets one key
    whole = ConfigResource(ConfigResource.Type.TOPIC, "legacy", set_config={"message.format.version": "2.8-IV1"})
    admin.alter_configs([whole])[whole].result(timeout=STUCK_S)
    entries = described(admin, "legacy")
    assert entries["message.format.version"].value == "2.8-IV1"
    assert entries["message.timestamp.difference.max.ms"].is_default  # not given: back to its default
    one = ConfigResource(ConfigResource.Type.TOPIC, "legacy", incremental_configs=[ConfigEntry(
        "message.timestamp.difference.max.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([one])[one].result(timeout=STUCK_S)
    entries = described(admin, "legacy")
    assert (entries["message.timestamp.difference.max.ms"].value, entries["message.format.version"].value) == (
        "60000", "2.8-IV1")
    assert delivered(server, "legacy", int(time.time() * 1000) - 2 * HOUR_MS).code() == KafkaError.INVALID_TIMESTAMP


def test_a_version_kafka_does_not_know_is_invalid_config(server: ThreadServer) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    with pytest.raises(KafkaException) as raised:
        admin.create_topics([NewTopic("bad", 1, config={"message.format.version": "banana"})])["bad"].result(
            timeout=STUCK_S)
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert httpx.get(f"{server.url}/v1/topics/bad", timeout=STUCK_S).status_code == 404


def test_http_create_takes_them_too(server: ThreadServer) -> None:
    response = httpx.post(f"{server.url}/v1/topics", timeout=STUCK_S, json={
        "name": "legacy-http", "partitions": 1,
        "config": {"message.format.version": "0.11.0", "message.timestamp.difference.max.ms": 1000}})
    assert response.status_code == 201, response.text
    assert response.json()["config"]["message.format.version"] == "0.11.0"
    assert response.json()["config"]["message.timestamp.difference.max.ms"] == 1000
