"""Topic admin over the Kafka protocol with real clients (kafka-python's and confluent-kafka's admin clients),
checked against the HTTP API of the same server."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import httpx
import kafka.errors as kerrors
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic
from kafka.admin import AlterConfigOp, ConfigResourceType, KafkaAdminClient
from kafka.admin import ConfigResource as KConfigResource

from tests.http.conftest import start_server  # noqa: F401

TIMEOUT = 15  # seconds, for each confluent-kafka future


def http_topic(server: Any, name: str) -> httpx.Response:
    return httpx.get(f"{server.url}/v1/topics/{name}", timeout=10)


@pytest.fixture
def server(start_server: Any) -> Any:  # noqa: F811
    return start_server()


@pytest.fixture
def kadmin(server: Any) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10_000)
    yield client
    client.close()


def confluent_admin(bootstrap: str, **config: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **config})


def kafka_error(future: Any) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT)
    return raised.value.args[0]


# ---- kafka-python -----------------------------------------------------------------------------------


def test_kafka_python_create_describe_alter_delete(server: Any, kadmin: KafkaAdminClient) -> None:
    created = kadmin.create_topics({"kp": {"num_partitions": 3, "replication_factor": 1,
                                           "configs": {"retention.ms": "3600000"}}})
    (topic,) = created["topics"]
    assert (topic["error_code"], topic["num_partitions"]) == (0, 3)  # v5 answers the created topic
    assert topic["configs"]["retention.ms"]["value"] == "3600000"
    detail = http_topic(server, "kp").json()
    assert detail["config"]["retention.ms"] == 3600000 and len(detail["partitions"]) == 3

    with pytest.raises(kerrors.TopicAlreadyExistsError):
        kadmin.create_topics({"kp": {"num_partitions": 1}})
    with pytest.raises(kerrors.InvalidConfigurationError):
        kadmin.create_topics({"kp-bad": {"configs": {"retention.ms": "soon"}}})
    assert http_topic(server, "kp-bad").status_code == 404

    kadmin.create_partitions({"kp": 5})
    assert len(http_topic(server, "kp").json()["partitions"]) == 5

    resource = KConfigResource(ConfigResourceType.TOPIC, "kp")
    configs = kadmin.describe_configs([resource], config_filter="all")["topic"]["kp"]
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.ms"]["config_source"] == "DEFAULT_CONFIG"
    assert configs["cleanup.policy"]["config_type"] == "LIST"

    altered = kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kp", {
        "max.message.bytes": (AlterConfigOp.SET, "2000000"),
        "retention.ms": (AlterConfigOp.DELETE, None),
        "cleanup.policy": (AlterConfigOp.APPEND, "compact"),
    })], incremental=True)
    assert altered == {"topic": {"kp": "OK"}}
    config = http_topic(server, "kp").json()["config"]
    assert config["max.message.bytes"] == 2_000_000
    assert config["retention.ms"] == 7 * 24 * 3600 * 1000  # back to Kafka's default
    assert config["cleanup.policy"] == "compact,delete"

    kadmin.delete_topics(["kp"])
    assert http_topic(server, "kp").status_code == 404
    with pytest.raises(kerrors.UnknownTopicOrPartitionError):
        kadmin.delete_topics(["kp"])


def test_kafka_python_refusals_change_nothing(server: Any, kadmin: KafkaAdminClient) -> None:
    kadmin.create_topics({"kr": {"num_partitions": 2}})
    kadmin.create_topics({"kr-validated": {"num_partitions": 4}}, validate_only=True)
    assert http_topic(server, "kr-validated").status_code == 404
    kadmin.create_partitions({"kr": 6}, validate_only=True)
    with pytest.raises(kerrors.InvalidPartitionsError):
        kadmin.create_partitions({"kr": 2})
    with pytest.raises(kerrors.InvalidRequestError):  # lakelog places partitions itself
        kadmin.create_partitions({"kr": {"count": 3, "assignments": [[0]]}})
    with pytest.raises(kerrors.InvalidTopicError):
        kadmin.create_topics({"bad/name": {}})
    with pytest.raises(kerrors.InvalidPartitionsError):
        kadmin.create_topics({"kr-zero": {"num_partitions": 0}})
    # '..' named the root's folder: deleting it once wiped every topic and the catalog.
    with pytest.raises(kerrors.InvalidTopicError):
        kadmin.delete_topics([".."])

    result = kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kr", {
        "retention.ms": (AlterConfigOp.SET, "1000"),
        "segment.bytes": (AlterConfigOp.APPEND, "1"),  # not a list: the whole resource is refused
    })], incremental=True, raise_on_unknown=False)
    assert "InvalidConfigurationError" in result["topic"]["kr"]
    kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kr", {"retention.ms": "1000"})],
                         incremental=True, validate_only=True)

    detail = http_topic(server, "kr").json()
    assert len(detail["partitions"]) == 2
    assert detail["config"]["retention.ms"] == 7 * 24 * 3600 * 1000
    assert http_topic(server, "kr-zero").status_code == 404
    assert Path(server.root, "_catalog").is_dir()


# ---- confluent-kafka (librdkafka) -------------------------------------------------------------------


def test_confluent_create_describe_alter_delete(server: Any) -> None:
    admin = confluent_admin(server.bootstrap)
    new = NewTopic("ck", num_partitions=3, config={"retention.ms": "7200000"})
    admin.create_topics([new])["ck"].result(timeout=TIMEOUT)
    assert http_topic(server, "ck").json()["config"]["retention.ms"] == 7_200_000

    again = kafka_error(admin.create_topics([NewTopic("ck", num_partitions=1)])["ck"])
    assert again.code() == KafkaError.TOPIC_ALREADY_EXISTS
    bad = kafka_error(admin.create_topics([NewTopic("ck-bad", config={"no.such.key": "1"})])["ck-bad"])
    assert bad.code() == KafkaError.INVALID_CONFIG and "no.such.key" in bad.str()

    admin.create_partitions([NewPartitions("ck", 5)])["ck"].result(timeout=TIMEOUT)
    assert len(http_topic(server, "ck").json()["partitions"]) == 5

    resource = ConfigResource(ConfigResource.Type.TOPIC, "ck")
    described = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT)
    assert described["retention.ms"].value == "7200000" and not described["retention.ms"].is_default
    assert described["segment.bytes"].is_default
    assert described["replication.factor"].is_read_only

    changes = ConfigResource(ConfigResource.Type.TOPIC, "ck", incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("min.compaction.lag.ms", "5000", incremental_operation=AlterConfigOpType.SET),
    ])
    admin.incremental_alter_configs([changes])[changes].result(timeout=TIMEOUT)
    config = http_topic(server, "ck").json()["config"]
    assert config["retention.ms"] == 7 * 24 * 3600 * 1000 and config["min.compaction.lag.ms"] == 5000
    described = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT)
    assert described["retention.ms"].is_default and not described["min.compaction.lag.ms"].is_default

    (broker_id,) = admin.list_topics(timeout=TIMEOUT).brokers  # librdkafka sends to the broker named
    broker = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
    assert admin.describe_configs([broker])[broker].result(timeout=TIMEOUT) == {}  # asked by tools: answered

    admin.delete_topics(["ck"])["ck"].result(timeout=TIMEOUT)
    assert http_topic(server, "ck").status_code == 404


# ---- authorization ----------------------------------------------------------------------------------


def test_create_needs_the_create_right(start_server: Any) -> None:  # noqa: F811
    server = start_server(api_keys_json='{"k-admin": "admin", "k-bob": "bob"}')

    def sasl(user: str, password: str) -> dict[str, str]:
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": user, "sasl.password": password}

    bob = confluent_admin(server.bootstrap, **sasl("bob", "k-bob"))
    denied = kafka_error(bob.create_topics([NewTopic("secured", num_partitions=1)])["secured"])
    assert denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    bob_kp = KafkaAdminClient(bootstrap_servers=server.bootstrap, security_protocol="SASL_PLAINTEXT",
                              sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password="k-bob")
    try:
        with pytest.raises(kerrors.TopicAuthorizationFailedError):
            bob_kp.create_topics({"secured": {"num_partitions": 1}})
    finally:
        bob_kp.close()
    headers = {"Authorization": "Bearer k-admin"}
    assert httpx.get(f"{server.url}/v1/topics/secured", headers=headers, timeout=10).status_code == 404

    admin = confluent_admin(server.bootstrap, **sasl("admin", "k-admin"))
    admin.create_topics([NewTopic("secured", num_partitions=2)])["secured"].result(timeout=TIMEOUT)
    detail = httpx.get(f"{server.url}/v1/topics/secured", headers=headers, timeout=10).json()
    assert len(detail["partitions"]) == 2
