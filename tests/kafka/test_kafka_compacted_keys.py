"""A compacted topic refuses records without a key, as Kafka does (issue 40: librdkafka's test 0011 expects
INVALID_RECORD, error 87, where lakelog stored them): over Kafka the delivery reports carry INVALID_RECORD,
over HTTP the call is a 422 naming each keyless record; nothing of the batch is written, and the refusal is
logged. `cleanup.policy=compact,delete` compacts too."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaError, Producer

from tests.http.conftest import ThreadServer, start_server  # noqa: F401  (the fixture)
from tests.patience import STUCK_S


@pytest.fixture
def server(start_server: Any) -> ThreadServer:  # noqa: F811
    return start_server()


def create(server: ThreadServer, name: str, policy: str) -> None:
    response = httpx.post(f"{server.url}/v1/topics", timeout=STUCK_S,
                          json={"name": name, "partitions": 1, "config": {"cleanup.policy": policy}})
    assert response.status_code == 201, response.text


def end_offset(server: ThreadServer, topic: str) -> int:
    return httpx.get(f"{server.url}/v1/topics/{topic}", timeout=STUCK_S).json()["partitions"][0]["log_end_offset"]


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_keyless_record_to_a_compacted_topic_is_invalid_record(server: ThreadServer, policy: str,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    topic = "compacted-" + policy.replace(",", "-")
    create(server, topic, policy)
    reports: list[tuple[Any, bytes | None]] = []
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 100, "retries": 0})
    with caplog.at_level(logging.WARNING, logger="lakelog"):
        for key in (b"k1", None, b"k2"):  # one batch: refused whole, as Kafka refuses it
            producer.produce(topic, key=key, value=b"v", partition=0,
                             on_delivery=lambda err, msg: reports.append((err, msg.key())))
        assert producer.flush(STUCK_S) == 0
    assert [(err.code() if err else None, key) for err, key in reports] == [
        (KafkaError.INVALID_RECORD, b"k1"), (KafkaError.INVALID_RECORD, None), (KafkaError.INVALID_RECORD, b"k2")]
    assert end_offset(server, topic) == 0
    assert any(f"produce to {topic} refused" in r.getMessage() and "INVALID_RECORD" in r.getMessage()
               for r in caplog.records)

    # keyed records are taken (an empty key is a key)
    producer.produce(topic, key=b"", value=b"v", partition=0, on_delivery=lambda err, msg: reports.append((err, b"")))
    assert producer.flush(STUCK_S) == 0 and reports[-1][0] is None
    assert end_offset(server, topic) == 1


def test_http_answers_422_naming_the_keyless_records(server: ThreadServer) -> None:
    create(server, "compacted", "compact")
    records = [{"key": "a", "value": "1"}, {"value": "2"}, {"key": None, "value": "3"}]
    response = httpx.post(f"{server.url}/v1/topics/compacted/records", json={"records": records}, timeout=STUCK_S)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error_code"] == "INVALID_RECORD" and "cleanup.policy=compact" in body["message"]
    assert [e["index"] for e in body["record_errors"]] == [1, 2]
    assert end_offset(server, "compacted") == 0

    create(server, "plain", "delete")  # any other topic takes keyless records
    response = httpx.post(f"{server.url}/v1/topics/plain/records", json={"records": records}, timeout=STUCK_S)
    assert response.status_code == 200, response.text
