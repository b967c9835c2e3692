"""Typed topics over Kafka: confluent-kafka's SchemaRegistryClient and AvroSerializer against lakelog's HTTP
port, its Producer against the Kafka listener of the same node, `confluent.value.schema.validation` set
with the client's admin; bad records refused with INVALID_RECORD and per-record errors (nothing written), or
dead-lettered with their reason once `errors.deadletterqueue.topic.name` is set."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from deltalake import DeltaTable
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.http.conftest import fetch_all, start_server  # noqa: F401  (the fixture)
from tests.kafka import raw_calls
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                      {"name": "item", "type": "string"}]}


def produce(bootstrap: str, topic: str, values: list[bytes], **config: object) -> list[tuple[object, object]]:
    """(error, offset) per value, delivered in one batch where the client can."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50, **config})
    reports: dict[int, tuple[object, object]] = {}
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=b"k", partition=0,
                         on_delivery=lambda err, msg, i=i: reports.__setitem__(i, (err, msg.offset())))
    assert producer.flush(STUCK_S) == 0
    return [reports[i] for i in range(len(values))]


def table_values(root: str, topic: str) -> list[bytes]:
    """The topic's values as an independent Delta reader sees them."""
    table = DeltaTable(f"{root}/topics/{topic}").to_pyarrow_table(columns=["offset", "value"]).sort_by("offset")
    return table.column("value").to_pylist()


def test_avro_serializer_produce_refusal_and_dead_letters(start_server) -> None:  # noqa: F811
    server = start_server()
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("orders", 1, 1, config={"confluent.value.schema.validation": "true"}),
                         NewTopic("orders-dlq", 1, 1)])["orders"].result(STUCK_S)
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "orders")])
    entries = next(iter(described.values())).result(STUCK_S)
    assert entries["confluent.value.schema.validation"].value == "true"
    assert entries["confluent.key.schema.validation"].value == "false"

    registry = SchemaRegistryClient({"url": server.url})
    serialize = AvroSerializer(registry, json.dumps(ORDER))
    context = SerializationContext("orders", MessageField.VALUE)
    good = [serialize({"id": i, "item": f"item-{i}"}, context) for i in range(4)]
    assert [err for err, _ in produce(server.bootstrap, "orders", good, **{"enable.idempotence": True})] == [None] * 4

    # a bad record refuses its whole batch: INVALID_RECORD, nothing written
    refused = produce(server.bootstrap, "orders", [good[0], b"not avro", good[1]])
    assert all(err is not None and err.code() == KafkaError.INVALID_RECORD for err, _ in refused), refused
    server.settle()  # the table is committed behind the journal's acknowledgement
    assert len(table_values(server.root, "orders")) == 4
    assert_topic_intact(server.root, "orders")

    # dead letters: set with IncrementalAlterConfigs; the good records are written, the bad one goes aside
    resource = ConfigResource(ResourceType.TOPIC, "orders", incremental_configs=[
        ConfigEntry("errors.deadletterqueue.topic.name", "orders-dlq",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(STUCK_S)
    wrong_id = b"\0\0\0\0\x63" + good[0][5:]
    mixed = produce(server.bootstrap, "orders", [good[2], b"not avro", good[3], wrong_id])
    assert [err for err, _ in mixed] == [None] * 4
    assert mixed[0][1] == 4  # the batch's base offset: its first record written
    server.settle()  # the table is committed behind the journal's acknowledgement
    values = table_values(server.root, "orders")
    deserialize = AvroDeserializer(registry)
    assert [deserialize(v, context)["id"] for v in values] == [0, 1, 2, 3, 2, 3]
    assert_topic_intact(server.root, "orders")
    with server.client() as http:
        dead = fetch_all(http, "orders-dlq", 0, value_format="base64")
    assert len(dead) == 2
    headers = [{h["key"]: h["value"] for h in r["headers"]} for r in dead]
    assert all(h["__lakelog.dlq.topic"] == "orders" and h["__lakelog.dlq.partition"] == "0" for h in headers)
    assert "magic byte 110" in headers[0]["__lakelog.dlq.reason"]
    assert "schema id 99 is not registered under subject 'orders-value'" in headers[1]["__lakelog.dlq.reason"]


def batch(values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(builder.build())


@pytest.mark.parametrize("version", [7, 8, 11])
def test_produce_answers_per_record_errors(start_server, version: int) -> None:  # noqa: F811
    server = start_server()
    with server.client() as http:
        assert http.post("/v1/topics", json={"name": "typed", "config": {
            "confluent.value.schema.validation": True}}).status_code == 201
    sid = SchemaRegistryClient({"url": server.url}).register_schema("typed-value", Schema('"string"', "AVRO"))
    ok = b"\0" + sid.to_bytes(4, "big") + b"\x04hi"
    Data = ProduceRequest.TopicProduceData
    request = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[Data(name="typed", partition_data=[
        Data.PartitionProduceData(index=0, records=batch([ok, b"\0\0\0", ok, ok + b"extra"]))])])
    (answer,) = raw_calls.call(server.bootstrap, request, version).responses[0].partition_responses
    assert answer.error_code == 87 and answer.base_offset == -1
    server.settle()  # the table is committed behind the journal's acknowledgement
    assert DeltaTable(f"{server.root}/topics/typed").to_pyarrow_table().num_rows == 0
    if version < 8:  # the per-record errors and the message came with v8 (KIP-467)
        return
    assert [(e.batch_index, e.batch_index_error_message.split(":")[0]) for e in answer.record_errors] == [
        (1, "value"), (3, "value")]
    assert "too short" in answer.record_errors[0].batch_index_error_message
    assert "2 of 4 records" in answer.error_message
