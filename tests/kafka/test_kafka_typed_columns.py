"""The issue's "done when", end to end on one node: confluent-kafka's SchemaRegistryClient against lakelog's
HTTP port, AvroSerializer records produced over Kafka (v1) and over HTTP (v2, a compatible evolution) to a
topic with `confluent.value.schema.validation=true`; the topic's Delta table holds the fields as the typed
`value_typed` struct (read by delta-rs and by DuckDB), its schema evolved; a consumer reads `value` byte for
byte; a record that is not valid for the subject is kept out of the table."""

from __future__ import annotations

import base64
import json

from confluent_kafka import KafkaError
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from deltalake import DeltaTable

from tests.delta_readers import duckdb_column
from tests.http import conftest as http_fixtures
from tests.kafka.typed_clients import consume_values, create_validated_topic, produce_each
from tests.log_check import assert_topic_intact

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback

V1 = {"type": "record", "name": "Trade", "fields": [
    {"name": "symbol", "type": "string"}, {"name": "qty", "type": "int"},
    {"name": "side", "type": {"type": "enum", "name": "Side", "symbols": ["BUY", "SELL"]}}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "venue", "type": ["null", "string"], "default": None}]}


def test_avro_records_land_as_typed_columns(start_server) -> None:
    server = start_server()
    create_validated_topic(server.bootstrap, "trades")
    registry = SchemaRegistryClient({"url": server.url})
    context = SerializationContext("trades", MessageField.VALUE)
    v1 = AvroSerializer(registry, json.dumps(V1))
    sent = [v1({"symbol": s, "qty": q, "side": side}, context)
            for s, q, side in (("ACME", 5, "BUY"), ("INIT", 7, "SELL"))]

    errors = produce_each(server.bootstrap, "trades", [*sent, b"not avro"])
    assert errors[:2] == [None, None]
    assert errors[2] is not None and errors[2].code() == KafkaError.INVALID_RECORD  # kept out of the table

    v2 = AvroSerializer(registry, json.dumps(V2))  # registers v2: compatible (a new optional field)
    later = v2({"symbol": "ACME", "qty": 1, "side": "SELL", "venue": "XNAS"}, context)
    with server.client() as http:
        answer = http.post("/v1/topics/trades/records", json={
            "value_format": "base64", "records": [{"value": base64.b64encode(later).decode()}]})
        assert answer.status_code == 200, answer.text
    sent.append(later)

    expected = [{"symbol": "ACME", "qty": 5, "side": "BUY", "venue": None},
                {"symbol": "INIT", "qty": 7, "side": "SELL", "venue": None},
                {"symbol": "ACME", "qty": 1, "side": "SELL", "venue": "XNAS"}]
    server.settle()  # the table is committed behind the journal's acknowledgement
    table = DeltaTable(f"{server.root}/topics/trades").to_pyarrow_table().sort_by("offset")
    assert table.column("value").to_pylist() == sent
    assert table.column("value_typed").to_pylist() == expected
    assert [f.name for f in table.schema.field("value_typed").type] == ["symbol", "qty", "side", "venue"]
    ducked = duckdb_column(server.root, "trades", "value_typed")
    assert [ducked[(0, o)] for o in range(3)] == expected
    assert_topic_intact(server.root, "trades")

    received = consume_values(server.bootstrap, "trades", 3)
    assert received == sent  # byte for byte
    deserialize = AvroDeserializer(registry)
    assert deserialize(received[2], context) == expected[2]
