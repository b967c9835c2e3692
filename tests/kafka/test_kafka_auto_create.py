"""Topics created on first use, as Kafka's `auto.create.topics.enable` (on by default) creates them: a
Metadata request that allows it (v0-v3 always do; v4+ say so) names a missing topic, and the topic is
created through the catalog with `num.partitions` partitions, at once (no LEADER_NOT_AVAILABLE round).
Unmodified clients (confluent-kafka, kcat) produce to a topic nobody created; a legal name only, never an
internal topic, only for a principal that may create topics; and off, a client sees UNKNOWN_TOPIC_OR_PARTITION
at once. A produce over HTTP creates the missing topic the same way (same setting, same right).
"""

from __future__ import annotations

import shutil
from pathlib import Path
import subprocess
import time
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaError, Producer
from kafka.protocol.metadata import MetadataRequest

from lakelog.kafka_api.errors import CODES
from lakelog.platform import Broker
from lakelog.settings import Settings
from tests.http import conftest as http_fixtures
from tests.kafka import raw_calls
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback

API_KEYS = '{"k-admin": "admin", "k-bob": "bob"}'
ADMIN = {"authorization": "Bearer k-admin"}


def topic_detail(server: Any, topic: str, headers: dict | None = None) -> httpx.Response:
    return httpx.get(f"{server.url}/v1/topics/{topic}", headers=headers, timeout=STUCK_S)


def deliver(bootstrap: str, topic: str, values: list[bytes], **config: Any) -> list[Any]:
    """Produce with confluent-kafka (librdkafka's defaults otherwise): the delivery reports, in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": int(STUCK_S * 1000),
                         **config})
    reports: list = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(STUCK_S) == 0
    return reports


def metadata(bootstrap: str, topic: str, version: int, allow: bool = True) -> Any:
    """One Metadata request for `topic`, at `version` (v4+ carry allow_auto_topic_creation): its one topic."""
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=allow)
    [answered] = raw_calls.call(bootstrap, request, version).topics
    return answered


# ---- created on first use ----------------------------------------------------------------------------


def test_confluent_kafka_produces_to_a_topic_nobody_created(start_server) -> None:
    server = start_server(num_partitions=3)  # Kafka's num.partitions (default 1)
    reports = deliver(server.bootstrap, "fresh", [b"v%d" % i for i in range(30)], partitioner="murmur2_random")
    assert [err for err, _ in reports if err is not None] == []
    detail = topic_detail(server, "fresh")
    assert detail.status_code == 200, detail.text
    assert len(detail.json()["partitions"]) == 3
    assert sum(p["log_end_offset"] for p in detail.json()["partitions"]) == 30
    assert_topic_intact(server.root, "fresh")


def test_kafka_default_is_one_partition_and_metadata_answers_it_at_once(start_server) -> None:
    server = start_server()
    answered = metadata(server.bootstrap, "made-by-metadata", 9)
    assert answered.error_code == 0 and len(answered.partitions) == 1  # created before the answer
    assert len(topic_detail(server, "made-by-metadata").json()["partitions"]) == 1
    answered = metadata(server.bootstrap, "made-by-v0", 0)  # v0-v3 always allow it
    assert answered.error_code == 0 and len(answered.partitions) == 1


def test_metadata_that_does_not_allow_it_creates_nothing(start_server) -> None:
    server = start_server()
    answered = metadata(server.bootstrap, "not-asked", 9, allow=False)
    assert answered.error_code == CODES["UNKNOWN_TOPIC_OR_PARTITION"]
    assert topic_detail(server, "not-asked").status_code == 404


@pytest.mark.parametrize("name,code", [("__transaction_state", "UNKNOWN_TOPIC_OR_PARTITION"),
                                       ("__internal-ish", "UNKNOWN_TOPIC_OR_PARTITION"),
                                       ("bad name!", "INVALID_TOPIC_EXCEPTION"), ("x" * 250, "INVALID_TOPIC_EXCEPTION"),
                                       ("..", "INVALID_TOPIC_EXCEPTION")])
def test_internal_and_illegal_names_are_never_created(start_server, name: str, code: str) -> None:
    server = start_server()
    assert metadata(server.bootstrap, name, 9).error_code == CODES[code]
    assert httpx.get(f"{server.url}/v1/topics", timeout=STUCK_S).json()["topics"] == []


def test_kcat_produces_to_a_topic_nobody_created(start_server) -> None:
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (make test installs it)")
    server = start_server()
    subprocess.run(["kcat", "-P", "-b", server.bootstrap, "-t", "kcat-made"], input=b"one\ntwo\n", check=True,
                   timeout=STUCK_S)
    detail = topic_detail(server, "kcat-made").json()
    assert [p["log_end_offset"] for p in detail["partitions"]] == [2]


# ---- turned off --------------------------------------------------------------------------------------


def test_off_a_produce_to_a_missing_topic_fails_at_once(start_server) -> None:
    server = start_server(auto_create_topics_enable=False)
    started = time.monotonic()
    reports = deliver(server.bootstrap, "absent", [b"v"], **{"topic.metadata.propagation.max.ms": 500,
                                                              "message.timeout.ms": 5000})
    [(err, _)] = reports
    assert err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert time.monotonic() - started < 10
    assert metadata(server.bootstrap, "absent", 9).error_code == CODES["UNKNOWN_TOPIC_OR_PARTITION"]
    assert topic_detail(server, "absent").status_code == 404
    response = httpx.post(f"{server.url}/v1/topics/absent/records", json={"records": [{"value": "x"}]},
                          timeout=STUCK_S)
    assert (response.status_code, response.json()["error_code"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert topic_detail(server, "absent").status_code == 404


# ---- access control ----------------------------------------------------------------------------------


def grant(server: Any, resource_type: str, name: str, *operations: str) -> None:
    acls = [{"principal": "bob", "resource_type": resource_type, "resource_name": name, "operation": operation}
            for operation in operations]
    response = httpx.post(f"{server.url}/v1/acls", json={"acls": acls}, headers=ADMIN, timeout=STUCK_S)
    assert response.status_code == 201, response.text


def test_creation_needs_create_on_the_topic_or_the_cluster(start_server) -> None:
    server = start_server(api_keys_json=API_KEYS)
    bob = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "bob",
           "sasl.password": "k-bob", "message.timeout.ms": 10_000}
    grant(server, "topic", "ledger", "write")  # write implies describe, not create
    [(err, _)] = deliver(server.bootstrap, "ledger", [b"v"], **bob)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # as Kafka answers it
    assert topic_detail(server, "ledger", ADMIN).status_code == 404
    http_bob = {"authorization": "Bearer k-bob"}
    response = httpx.post(f"{server.url}/v1/topics/ledger/records", json={"records": [{"value": "x"}]},
                          headers=http_bob, timeout=STUCK_S)
    assert (response.status_code, response.json()["error_code"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
    assert topic_detail(server, "ledger", ADMIN).status_code == 404

    grant(server, "topic", "ledger", "create")
    [(err, msg)] = deliver(server.bootstrap, "ledger", [b"v"], **bob)
    assert err is None and msg.offset() == 0
    grant(server, "cluster", "kafka-cluster", "create")
    grant(server, "topic", "over-http", "write")
    response = httpx.post(f"{server.url}/v1/topics/over-http/records", json={"records": [{"value": "x"}]},
                          headers=http_bob, timeout=STUCK_S)
    assert response.status_code == 200, response.text
    assert topic_detail(server, "over-http", ADMIN).status_code == 200


# ---- HTTP --------------------------------------------------------------------------------------------


def test_http_produce_creates_the_missing_topic(start_server) -> None:
    server = start_server(num_partitions=2)
    response = httpx.post(f"{server.url}/v1/topics/made-over-http/records",
                          json={"records": [{"value": "a", "partition": 1}]}, timeout=STUCK_S)
    assert response.status_code == 200, response.text
    assert response.json()["offsets"][0]["partition"] == 1
    assert len(topic_detail(server, "made-over-http").json()["partitions"]) == 2
    # Bad input changes nothing: a partition past num.partitions refuses the call before anything is created.
    response = httpx.post(f"{server.url}/v1/topics/never-made/records",
                          json={"records": [{"value": "a", "partition": 2}]}, timeout=STUCK_S)
    assert (response.status_code, response.json()["error_code"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert topic_detail(server, "never-made").status_code == 404


def test_http_produce_creates_a_topic_another_node_deleted(start_server) -> None:
    """This node opened the topic; another node deletes it: once this node's catalog shows it (its next
    refresh, within a second), the next produce creates it again (the node's note of open topics is only a
    hint), with offsets from 0."""
    server = start_server()
    produce = lambda: httpx.post(f"{server.url}/v1/topics/moved/records", json={"records": [{"value": "a"}]},
                                 timeout=STUCK_S)
    assert produce().json()["offsets"][0]["offset"] == 0
    assert produce().json()["offsets"][0]["offset"] == 1
    with Broker(Settings(root=server.root)) as other:  # another node on the root
        other.delete_topic("moved")
    deadline = time.monotonic() + STUCK_S
    while "moved" in [t["name"] for t in httpx.get(f"{server.url}/v1/topics", timeout=STUCK_S).json()["topics"]]:
        assert time.monotonic() < deadline, "the node never saw the delete"
        time.sleep(0.1)
    answer = produce()
    assert answer.status_code == 200 and answer.json()["offsets"][0]["offset"] == 0, answer.text
    assert_topic_intact(server.root, "moved")


def test_a_former_table_still_being_deleted_is_not_yet_created(start_server) -> None:
    """What an interrupted delete left in the name's folder keeps it from being created (Metadata answers
    LEADER_NOT_AVAILABLE, which clients retry, as Kafka answers a topic it cannot create yet) until `lakelog
    topics delete` finishes the delete."""
    server = start_server()
    log_folder = Path(server.root, "topics", "halfway", "_delta_log")
    log_folder.mkdir(parents=True)
    (log_folder / "00000000000000000007.json").write_text("{}")  # a commit of a table deleted halfway
    assert metadata(server.bootstrap, "halfway", 9).error_code == CODES["LEADER_NOT_AVAILABLE"]
    with Broker(Settings(root=server.root)) as admin:
        admin.delete_topic("halfway")  # finishes the interrupted delete
    answered = metadata(server.bootstrap, "halfway", 9)
    assert answered.error_code == 0 and len(answered.partitions) == 1
