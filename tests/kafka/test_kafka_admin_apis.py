"""The admin APIs older and other clients rely on (issue 24), over a socket against a running server, each
checked against the HTTP API of the same server: AlterConfigs, DeleteRecords, DescribeLogDirs,
DescribeProducers, DescribeCluster and the ACL APIs.

Old versions are sent as such (`raw_calls.call`): a client speaking only v0 (KafkaJS, sarama) gets the
same result as kafka-python's admin client negotiating the newest.
"""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import kafka.errors as kerrors
import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.protocol.admin import (
    AlterConfigsRequest,
    CreateAclsRequest,
    DeleteRecordsRequest,
    DescribeAclsRequest,
    DescribeLogDirsRequest,
)

from lakelog.kafka_api.errors import CODES
from lakelog.spark_jobs.jobs import run_job
from tests.http.conftest import ThreadServer, start_server  # noqa: F401  (the fixture)
from tests.kafka.raw_calls import call
from tests.log_check import assert_topic_intact

WEEK_MS = 7 * 24 * 3600 * 1000
ADMIN_KEYS = '{"k-admin": "admin", "k-bob": "bob"}'
ADMIN_HEADERS = {"Authorization": "Bearer k-admin"}


@pytest.fixture
def server(start_server: Any) -> ThreadServer:  # noqa: F811
    return start_server()


@pytest.fixture
def kadmin(server: ThreadServer) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10_000)
    yield client
    client.close()


def create_topic(server: ThreadServer, name: str, partitions: int, **config: Any) -> None:
    response = httpx.post(f"{server.url}/v1/topics", json={"name": name, "partitions": partitions,
                                                           "config": config}, timeout=10)
    assert response.status_code == 201, response.text


def produce(server: ThreadServer, topic: str, count: int, partitions: int) -> None:
    records = [{"key": f"k{i}", "value": str(i), "partition": i % partitions} for i in range(count)]
    response = httpx.post(f"{server.url}/v1/topics/{topic}/records", json={"records": records}, timeout=10)
    assert response.status_code == 200, response.text


def detail(server: ThreadServer, topic: str) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/v1/topics/{topic}", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def partitions(server: ThreadServer, topic: str) -> dict[int, dict[str, Any]]:
    return {p["partition"]: p for p in detail(server, topic)["partitions"]}


# ---- AlterConfigs ------------------------------------------------------------------------------------


def alter_v0(server: ThreadServer, topic: str, configs: dict[str, str | None], validate_only: bool = False,
             version: int = 0) -> Any:
    resource = AlterConfigsRequest.AlterConfigsResource(resource_type=2, resource_name=topic, configs=[
        AlterConfigsRequest.AlterConfigsResource.AlterableConfig(name=k, value=v) for k, v in configs.items()])
    (answer,) = call(server.bootstrap, AlterConfigsRequest(resources=[resource], validate_only=validate_only),
                     version).responses
    return answer


def test_alter_configs_v0_replaces_the_whole_config(server: ThreadServer, kadmin: KafkaAdminClient) -> None:
    create_topic(server, "altered", 1, **{"retention.ms": 3_600_000, "segment.ms": 60_000})

    checked = alter_v0(server, "altered", {"max.message.bytes": "2000000"}, validate_only=True)
    assert checked.error_code == 0
    assert detail(server, "altered")["config"]["max.message.bytes"] == 1_048_588  # validated only

    refused = alter_v0(server, "altered", {"retention.ms": "soon"})
    assert refused.error_code == CODES["INVALID_CONFIG"] and "retention.ms" in refused.error_message
    assert detail(server, "altered")["config"]["retention.ms"] == 3_600_000  # a refused resource changes nothing
    assert alter_v0(server, "nowhere", {}).error_code == CODES["UNKNOWN_TOPIC_OR_PARTITION"]

    done = alter_v0(server, "altered", {"max.message.bytes": "2000000", "cleanup.policy": "compact,delete"})
    assert (done.error_code, done.resource_name) == (0, "altered")
    config = detail(server, "altered")["config"]
    assert config["max.message.bytes"] == 2_000_000 and config["cleanup.policy"] == "compact,delete"
    assert config["retention.ms"] == WEEK_MS and config["segment.ms"] == WEEK_MS  # not given: the defaults

    # kafka-python's non-incremental alter (v2) sends the other modified keys again, as Kafka expects
    resource = ConfigResource(ConfigResourceType.TOPIC, "altered", {"retention.ms": "7200000"})
    assert kadmin.alter_configs([resource], incremental=False, raise_on_unknown=False) == {"topic": {"altered": "OK"}}
    config = detail(server, "altered")["config"]
    assert config["retention.ms"] == 7_200_000 and config["max.message.bytes"] == 2_000_000


# ---- DeleteRecords -----------------------------------------------------------------------------------


def delete_v0(server: ThreadServer, topic: str, offsets: dict[int, int]) -> dict[int, tuple[int, int]]:
    request = DeleteRecordsRequest(timeout_ms=10_000, topics=[DeleteRecordsRequest.DeleteRecordsTopic(
        name=topic, partitions=[DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
            partition_index=p, offset=o) for p, o in offsets.items()])])
    (answer,) = call(server.bootstrap, request, 0).topics
    return {p.partition_index: (p.error_code, p.low_watermark) for p in answer.partitions}


def test_delete_records_v0_moves_the_log_start(server: ThreadServer, kadmin: KafkaAdminClient) -> None:
    create_topic(server, "trimmed", 3)
    produce(server, "trimmed", 30, 3)  # one flush: one file holding the three partitions' slices

    answered = delete_v0(server, "trimmed", {0: 4, 1: -1, 2: 11})
    assert answered == {0: (0, 4), 1: (0, 10), 2: (CODES["OFFSET_OUT_OF_RANGE"], -1)}
    found = partitions(server, "trimmed")
    assert [(found[p]["log_start_offset"], found[p]["log_end_offset"]) for p in range(3)] == [(4, 10), (10, 10), (0, 10)]
    records = httpx.get(f"{server.url}/v1/topics/trimmed/partitions/0/records", params={"offset": 4}).json()
    assert [r["offset"] for r in records["records"]] == list(range(4, 10))
    below = httpx.get(f"{server.url}/v1/topics/trimmed/partitions/0/records", params={"offset": 0})
    assert below.status_code == 409 and below.json()["error_code"] == "OFFSET_OUT_OF_RANGE"

    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, auto_offset_reset="none", request_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition("trimmed", 0)])
        consumer.seek(TopicPartition("trimmed", 0), 2)
        with pytest.raises(kerrors.OffsetOutOfRangeError):
            for _ in range(20):
                consumer.poll(500)
    finally:
        consumer.close()

    # Delta readers see the same: the table holds nothing below the new log starts, and nothing was lost
    offsets = assert_topic_intact(server.root, "trimmed")
    assert offsets[0] == list(range(4, 10)) and not offsets.get(1) and offsets[2] == list(range(10))

    # kafka-python's admin (v2), into the file the first delete wrote; below the log start nothing moves
    result = kadmin.delete_records({TopicPartition("trimmed", 0): 7, TopicPartition("trimmed", 2): 0})
    assert {tp.partition: r["low_watermark"] for tp, r in result.items()} == {0: 7, 2: 0}
    produce(server, "trimmed", 3, 3)
    assert partitions(server, "trimmed")[1]["log_end_offset"] == 11
    offsets = assert_topic_intact(server.root, "trimmed")
    assert offsets[0] == list(range(7, 11)) and offsets[1] == [10]


# ---- DescribeLogDirs, DescribeProducers --------------------------------------------------------------


def test_describe_log_dirs_answers_each_partitions_size(server: ThreadServer, kadmin: KafkaAdminClient) -> None:
    create_topic(server, "sized", 2)
    produce(server, "sized", 40, 2)
    produce(server, "sized", 10, 1)
    sizes = {p: found["size_bytes"] for p, found in partitions(server, "sized").items()}
    assert all(size > 0 for size in sizes.values())

    (broker,) = kadmin.describe_log_dirs()
    (log_dir,) = broker["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == server.root
    (topic,) = [t for t in log_dir["topics"] if t["name"] == "sized"]
    assert {p["partition_index"]: p["partition_size"] for p in topic["partitions"]} == sizes

    request = DescribeLogDirsRequest(topics=[DescribeLogDirsRequest.DescribableLogDirTopic(topic="sized",
                                                                                          partitions=[1])])
    (result,) = call(server.bootstrap, request, 0).results  # v0: what older admin tools send
    (topic,) = result.topics
    assert [(p.partition_index, p.partition_size) for p in topic.partitions] == [(1, sizes[1])]

    # once rolled, each partition's files are its own: the sizes are those of the table's files
    assert run_job("roll", server.app.state.services.broker, topics=["sized"]).commits >= 1
    actions = pa.table(DeltaTable(f"{server.root}/topics/sized").get_add_actions(flatten=True)).to_pydict()
    in_table = {p: 0 for p in sizes}
    for partition, size in zip(actions["min.partition"], actions["size_bytes"]):
        in_table[partition] += size
    (broker,) = kadmin.describe_log_dirs()
    (topic,) = [t for t in broker["log_dirs"][0]["topics"] if t["name"] == "sized"]
    assert {p["partition_index"]: p["partition_size"] for p in topic["partitions"]} == in_table
    assert_topic_intact(server.root, "sized")


def test_describe_producers_answers_a_kafka_producers_state(server: ThreadServer,
                                                            kadmin: KafkaAdminClient) -> None:
    create_topic(server, "produced", 2)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, enable_idempotence=True, acks="all")
    try:
        for i in range(5):
            producer.send("produced", value=str(i).encode(), partition=1).get(10)
        producer_id = producer._transaction_manager.producer_id_and_epoch.producer_id
    finally:
        producer.close()
    found = kadmin.describe_producers([TopicPartition("produced", 1), TopicPartition("produced", 0)])
    (state,) = found[TopicPartition("produced", 1)].active_producers
    assert (state.producer_id, state.last_sequence) == (producer_id, 4)
    assert found[TopicPartition("produced", 0)].active_producers == []
    assert_topic_intact(server.root, "produced")


# ---- DescribeCluster ---------------------------------------------------------------------------------


def test_describe_cluster_names_the_brokers_metadata_names(server: ThreadServer, kadmin: KafkaAdminClient) -> None:
    described = kadmin.describe_cluster()
    (broker,) = described["brokers"]
    assert described["cluster_id"] == "lakelog" and described["controller_id"] == broker["broker_id"]
    assert f"{broker['host']}:{broker['port']}" == server.bootstrap

    confluent = AdminClient({"bootstrap.servers": server.bootstrap})
    cluster = confluent.describe_cluster(include_authorized_operations=True).result(timeout=15)
    assert cluster.cluster_id == "lakelog" and [n.id for n in cluster.nodes] == [broker["broker_id"]]
    assert {op.name for op in cluster.authorized_operations} >= {"DESCRIBE", "ALTER"}  # authentication off
    assert list(confluent.list_topics(timeout=15).brokers) == [broker["broker_id"]]


# ---- ACLs --------------------------------------------------------------------------------------------


def sasl_admin(server: ThreadServer, user: str, password: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10_000,
                            security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                            sasl_plain_username=user, sasl_plain_password=password)


def http_acls(server: ThreadServer) -> list[dict[str, str]]:
    return httpx.get(f"{server.url}/v1/acls", headers=ADMIN_HEADERS, timeout=10).json()["acls"]


def bob_reads(server: ThreadServer, topic: str) -> int:
    response = httpx.get(f"{server.url}/v1/topics/{topic}/partitions/0/records", params={"offset": 0},
                         headers={"Authorization": "Bearer k-bob"}, timeout=10)
    return response.status_code


def test_acls_are_created_described_and_deleted_over_kafka(start_server: Any) -> None:  # noqa: F811
    server = start_server(api_keys_json=ADMIN_KEYS)
    httpx.post(f"{server.url}/v1/topics", json={"name": "orders", "partitions": 1}, headers=ADMIN_HEADERS)
    read_orders = ACL("User:bob", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                      ResourcePattern(ResourceType.TOPIC, "orders", ACLResourcePatternType.LITERAL))
    write_pay = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.TOPIC, "pay", ACLResourcePatternType.PREFIXED))
    from_host = ACL("User:bob", "10.0.0.1", ACLOperation.READ, ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.TOPIC, "orders", ACLResourcePatternType.LITERAL))
    admin, bob = sasl_admin(server, "admin", "k-admin"), sasl_admin(server, "bob", "k-bob")
    try:
        assert bob_reads(server, "orders") == 403
        created = admin.create_acls([read_orders, write_pay, from_host])
        assert created["succeeded"] == [read_orders, write_pay]
        assert created["failed"] == [kerrors.InvalidRequestError]  # hosts other than * do not map
        assert {(a["principal"], a["pattern_type"], a["resource_name"], a["operation"]) for a in http_acls(server)} == {
            ("bob", "literal", "orders", "read"), ("bob", "prefixed", "pay", "write")}
        assert bob_reads(server, "orders") == 200  # the ACL is lakelog's: it applies over HTTP too

        everything = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                               ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
        described, error = admin.describe_acls(everything)
        assert error is kerrors.NoError and set(described) == {read_orders, write_pay}
        with pytest.raises(kerrors.ClusterAuthorizationFailedError):  # only admins manage ACLs, as over HTTP
            bob.describe_acls(everything)

        matching = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                             ResourcePatternFilter(ResourceType.TOPIC, "payments", ACLResourcePatternType.MATCH))
        ((_, removed, error),) = admin.delete_acls([matching])
        assert error is kerrors.NoError and removed == [write_pay]
        assert [a["resource_name"] for a in http_acls(server)] == ["orders"]
    finally:
        admin.close()
        bob.close()


def test_acl_apis_in_v0(server: ThreadServer) -> None:
    """v0 has no pattern types: literal only. Without API keys everyone manages ACLs, as over HTTP."""
    creation = CreateAclsRequest.AclCreation(resource_type=2, resource_name="orders", principal="User:carol",
                                             host="*", operation=3, permission_type=3)
    (created,) = call(server.bootstrap, CreateAclsRequest(creations=[creation]), 0).results
    assert created.error_code == 0
    assert http_acls(server) == [{"principal": "carol", "resource_type": "topic", "pattern_type": "literal",
                                  "resource_name": "orders", "operation": "read", "permission": "allow"}]
    request = DescribeAclsRequest(resource_type_filter=2, resource_name_filter="orders", principal_filter=None,
                                  host_filter=None, operation=1, permission_type=1)
    described = call(server.bootstrap, request, 0)
    assert described.error_code == 0
    (resource,) = described.resources
    assert [(a.principal, a.host, a.operation) for a in resource.acls] == [("User:carol", "*", 3)]
