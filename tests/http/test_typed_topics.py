"""Typed topics over HTTP: records serialized by confluent-kafka's JSONSerializer and AvroSerializer (against
lakelog's registry) produced as bytes, embedded JSON (`value_format=json`) converted with the subject's
latest schema, bad records refused with a per-record error list (nothing written) or dead-lettered; fetch
with `value_typed=true` answers the records' fields."""

from __future__ import annotations

import base64
import datetime
import json

import pyarrow as pa
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from deltalake import DeltaTable

from lakelog.ingest_api.models import FetchResponse

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
    server.settle()  # the table is committed behind the acknowledgement; read it directly once it holds them
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
    server.settle()  # the tables are committed behind the acknowledgement; read them directly once they hold them
    assert len(stored_values(server.root, "orders")) == 3
    assert_topic_intact(server.root, "orders")
    assert_topic_intact(server.root, "orders-dlq")


SHIPMENT = {"type": "record", "name": "Shipment", "fields": [
    {"name": "id", "type": "long"}, {"name": "label", "type": "bytes"},
    {"name": "sent", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "to", "type": {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}},
    {"name": "sizes", "type": {"type": "map", "values": "int"}},
    {"name": "note", "type": ["null", "string"], "default": None}]}


def test_fetch_answers_the_fields_of_a_typed_topic(start_server) -> None:  # noqa: F811
    server = start_server()
    registry = SchemaRegistryClient({"url": server.url})
    context = SerializationContext("shipments", MessageField.VALUE)
    serialize = AvroSerializer(registry, json.dumps(SHIPMENT))
    sent = datetime.datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=datetime.timezone.utc)
    value = serialize({"id": 7, "label": b"\x00\xfe", "sent": sent, "to": {"city": "Lyon"}, "sizes": {"s": 1},
                       "note": None}, context)
    with server.client() as http:
        create_topic(http, "shipments", **{"confluent.value.schema.validation": True})
        create_topic(http, "untyped")
        second = serialize({"id": 8, "label": b"", "sent": 0, "to": {"city": "Oslo"}, "sizes": {}, "note": "fragile"},
                           context)
        answer = http.post("/v1/topics/shipments/records", json={"value_format": "base64", "records": [
            {"key": "k", "value": b64(value)}, {"value": b64(second)}]})
        assert answer.status_code == 200, answer.text

        answer = http.get("/v1/topics/shipments/partitions/0/records",
                          params={"offset": 0, "value_typed": "true", "value_format": "base64"})
        assert answer.status_code == 200, answer.text
        FetchResponse.model_validate(answer.json())  # the documented model holds the answer
        records = answer.json()["records"]
        assert [r["value_typed"] for r in records] == [
            {"id": 7, "label": "AP4=", "sent": "2026-03-04T05:06:07.890000Z", "to": {"city": "Lyon"},
             "sizes": {"s": 1}, "note": None},
            {"id": 8, "label": "", "sent": "1970-01-01T00:00:00.000000Z", "to": {"city": "Oslo"}, "sizes": {},
             "note": "fragile"}]
        assert base64.b64decode(records[0]["value"]) == value  # the bytes are answered as ever
        assert "value_typed" not in fetch_all(http, "shipments", 0)[0]  # only when asked

        arrow = http.get("/v1/topics/shipments/partitions/0/records",
                         params={"offset": 0, "format": "arrow", "value_typed": "true"})
        assert arrow.status_code == 200, arrow.text
        table = pa.ipc.open_stream(arrow.content).read_all()
        assert table.column("value_typed").to_pylist()[1]["to"] == {"city": "Oslo"}
        server.settle()  # the table is committed behind the acknowledgement; read it directly once it holds them
        stored = DeltaTable(f"{server.root}/topics/shipments").to_pyarrow_table(columns=["offset", "value_typed"])
        assert table.column("value_typed").to_pylist() == stored.sort_by("offset").column("value_typed").to_pylist()

        refused = http.get("/v1/topics/untyped/partitions/0/records", params={"offset": 0, "value_typed": "true"})
        assert refused.status_code == 422 and "not typed" in refused.json()["message"], refused.text
