"""What unmodified Kafka clients (kafka-python, confluent-kafka, aiokafka) see of lakelog's ACLs, with
SASL/PLAIN on API keys: TOPIC_AUTHORIZATION_FAILED on produce and on consume, GROUP_AUTHORIZATION_FAILED
on joining a group, and the same client succeeds once an ACL is granted over HTTP. A wrong password is an
authentication failure. Each client's way of reporting an error is in tests/kafka/client_errors.py.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, TypeVar

import httpx
import pytest

from tests.http import conftest as http_fixtures
from tests.http.conftest import ThreadServer
from tests.kafka import client_errors
from tests.kafka.client_errors import create_topic, log_range, produce
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback
client = client_errors.client  # the fixture: each test runs once per client

API_KEYS = '{"k-admin": "admin", "k-bob": "bob"}'
ADMIN = {"authorization": "Bearer k-admin"}
BOB = ("bob", "k-bob")  # SASL/PLAIN: the principal, its API key
T = TypeVar("T")


def eventually(attempt: Callable[[], T], timeout_s: float = 10) -> T:
    """attempt() until it does not raise: a grant reaches a client with its next metadata."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return attempt()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def grant(server: ThreadServer, resource_type: str, name: str, operation: str) -> None:
    acl = {"principal": "bob", "resource_type": resource_type, "resource_name": name, "operation": operation}
    response = httpx.post(f"{server.url}/v1/acls", json={"acls": [acl]}, headers=ADMIN, timeout=STUCK_S)
    assert response.status_code == 201, response.text


# ---- ACLs and authentication ------------------------------------------------------------------------


def test_acl_denials_then_grants(start_server, client) -> None:
    server = start_server(api_keys_json=API_KEYS)
    topic = f"payroll-{client.name}"
    create_topic(server, topic, headers=ADMIN)
    produce(server, topic, "seed", headers=ADMIN)

    producer = client.producer(server.bootstrap, BOB)
    fresh = None
    try:
        with pytest.raises(Exception) as denied:  # no rights: the topic's metadata is refused
            producer.send(topic, b"bob-1")
        client.check(denied.value, "TOPIC_AUTHORIZATION_FAILED")
        grant(server, "topic", topic, "describe")
        fresh = client.producer(server.bootstrap, BOB)  # no cached metadata: this refusal is the produce's
        with pytest.raises(Exception) as denied:  # it may see the topic, not write it
            fresh.send(topic, b"bob-2")
        client.check(denied.value, "TOPIC_AUTHORIZATION_FAILED")
        grant(server, "topic", topic, "write")
        offsets = [eventually(lambda: producer.send(topic, b"bob-3")),  # the producer refused first
                   eventually(lambda: fresh.send(topic, b"bob-4"))]
    finally:
        producer.close()
        if fresh is not None:
            fresh.close()
    assert log_range(server, topic, ADMIN) == (0, 3) and offsets == [1, 2]

    group = f"payroll-readers-{client.name}"
    grant(server, "group", group, "read")
    consumer = client.consumer(server.bootstrap, topic, group, "earliest", BOB)
    try:  # it may describe the topic and read the group, not read the topic: the fetch is refused
        client.check(consumer.error(), "TOPIC_AUTHORIZATION_FAILED")
        grant(server, "topic", topic, "read")
        assert [v for _, v in eventually(lambda: consumer.records(count=3))] == [b"seed", b"bob-3", b"bob-4"]
    finally:
        consumer.close()

    other = f"auditors-{client.name}"
    consumer = client.consumer(server.bootstrap, topic, other, "earliest", BOB)
    try:
        client.check(consumer.error(), "GROUP_AUTHORIZATION_FAILED")  # FindCoordinator: no describe
        grant(server, "group", other, "describe")
        client.check(consumer.error(), "GROUP_AUTHORIZATION_FAILED")  # JoinGroup: no read
        grant(server, "group", other, "read")
        assert [v for _, v in eventually(lambda: consumer.records(count=3))] == [b"seed", b"bob-3", b"bob-4"]
    finally:
        consumer.close()
    assert_topic_intact(server.root, topic)


def test_wrong_password_fails_authentication(start_server, client, caplog) -> None:
    server = start_server(api_keys_json=API_KEYS)
    caplog.set_level(logging.INFO)
    errors = client.authentication_errors(server.bootstrap, ("bob", "not-bobs-key"), caplog)
    refusals = [e for e in errors if client.is_error(e, "SASL_AUTHENTICATION_FAILED")]
    assert refusals, f"no authentication failure among {errors!r}"
    assert all("invalid SASL/PLAIN credentials" in str(e) for e in refusals)  # lakelog's message reached it
