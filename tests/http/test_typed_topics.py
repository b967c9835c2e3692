"""Typed topics over HTTP: records serialized by confluent-kafka's JSONSerializer and AvroSerializer (against
lakelog's registry) produced as bytes, embedded JSON (`value_format=json`) converted with the subject's
latest schema, bad records refused with a per-record error list (nothing written) or dead-lettered."""

from __future__ import annotations

import base64
import json

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from deltalake import DeltaTable

from tests.http.conftest import create_topic, end_offsets, fetch_all, start_server  # noqa: F401  (the fixture)
from tests.log_check import assert_topic_intact

PAYMENT = {"type": "object", "properties": {"id": {"type": "integer"}, "amount": {"type": "number"}},
           "required": ["id", "amount"]}
ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                      {"name": "item", "type": "string"},
                                                      {"name": "note", "type": ["null", "string"], "default": None}]}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def stored_values(root: str, topic: str) -> list[bytes]:
    table = DeltaTable(f"{root}/topics/{topic}").to_pyarrow_table(columns=["offset", "value"]).sort_by("offset")
    return table.column("value").to_pylist()


def test_json_serializer_bytes_refusal_and_embedded_json(start_server) -> None:  # noqa: F811
    server = start_server()
    registry = SchemaRegistryClient({"url": server.url})
    context = SerializationContext("payments", MessageField.VALUE)
    serialize = JSONSerializer(json.dumps(PAYMENT), registry)
    deserialize = JSONDeserializer(json.dumps(PAYMENT))
    with server.client() as http:
        create_topic(http, "payments", **{"confluent.value.schema.validation": True})
        sent = [serialize({"id": i, "amount": i * 1.5}, context) for i in range(3)]
        answer = http.post("/v1/topics/payments/records", json={
            "value_format": "base64", "records": [{"value": b64(v)} for v in sent]})
        assert answer.status_code == 200, answer.text
        assert [o["offset"] for o in answer.json()["offsets"]] == [0, 1, 2]

        refused = http.post("/v1/topics/payments/records", json={"value_format": "base64", "records": [
            {"value": b64(sent[0])}, {"value": b64(b"{}")}, {"value": b64(sent[0][:5] + b'{"id": 1}')}]})
        assert refused.status_code == 422, refused.text
        body = refused.json()
        assert body["error_code"] == "INVALID_RECORD" and "nothing was written" in body["message"]
        assert [e["index"] for e in body["record_errors"]] == [1, 2]
        assert "'amount' is a required property" in body["record_errors"][1]["message"]
        assert end_offsets(http, "payments") == [3]

        embedded = http.post("/v1/topics/payments/records?value_format=json", headers={
            "Content-Type": "application/x-ndjson"}, content=b'{"value": {"id": 9, "amount": 2.5}}\n')
        assert embedded.status_code == 200, embedded.text
        not_valid = http.post("/v1/topics/payments/records", json={
            "value_format": "json", "records": [{"value": {"id": "nine", "amount": 1}}]})
        assert not_valid.status_code == 422 and "does not convert" in not_valid.json()["record_errors"][0]["message"]
    values = stored_values(server.root, "payments")
    assert [deserialize(v, context) for v in values] == [{"id": i, "amount": i * 1.5} for i in range(3)] + [
        {"id": 9, "amount": 2.5}]
    assert_topic_intact(server.root, "payments")


def test_avro_embedded_json_and_dead_letters(start_server) -> None:  # noqa: F811
    server = start_server()
    registry = SchemaRegistryClient({"url": server.url})
    context = SerializationContext("orders", MessageField.VALUE)
    serialize = AvroSerializer(registry, json.dumps(ORDER))
    deserialize = AvroDeserializer(registry)
    first = serialize({"id": 1, "item": "pen", "note": None}, context)  # registers the schema
    with server.client() as http:
        create_topic(http, "orders", 2, **{"confluent.value.schema.validation": "true"})
        create_topic(http, "orders-dlq")
        config = http.patch("/v1/topics/orders/config", json={"config": {
            "errors.deadletterqueue.topic.name": "orders-dlq"}})
        assert config.status_code == 200 and config.json()["config"]["confluent.value.schema.validation"] is True
        answer = http.post("/v1/topics/orders/records", json={"value_format": "json", "records": [
            {"key": "a", "value": {"id": 2, "item": "ink", "note": "blue"}, "partition": 1},
            {"key": "b", "value": {"id": 3}, "partition": 1, "headers": [{"key": "trace", "value": "t-1"}]},
            {"key": "c", "value": {"id": 4, "item": "pad"}, "partition": 1}]})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert [(o["partition"], o["offset"]) for o in body["offsets"]] == [(1, 0), (-1, -1), (1, 1)]
        (letter,) = body["dead_letters"]
        assert (letter["index"], letter["topic"], letter["partition"], letter["offset"]) == (1, "orders-dlq", 0, 0)
        assert "does not convert" in letter["reason"]

        raw = http.post("/v1/topics/orders/records", json={"value_format": "base64", "records": [
            {"value": b64(first), "partition": 0}]})
        assert raw.status_code == 200, raw.text

        (dead,) = fetch_all(http, "orders-dlq", 0, value_format="json")
        headers = {h["key"]: h["value"] for h in dead["headers"]}
        assert dead["key"] == "b" and dead["value"] == {"id": 3}  # the record as sent
        assert headers["trace"] == "t-1" and headers["__lakelog.dlq.topic"] == "orders"
        assert headers["__lakelog.dlq.partition"] == "1" and "does not convert" in headers["__lakelog.dlq.reason"]
        written = fetch_all(http, "orders", 1, value_format="base64")
    assert [deserialize(base64.b64decode(r["value"]), context) for r in written] == [
        {"id": 2, "item": "ink", "note": "blue"}, {"id": 4, "item": "pad", "note": None}]
    assert len(stored_values(server.root, "orders")) == 3
    assert_topic_intact(server.root, "orders")
    assert_topic_intact(server.root, "orders-dlq")
