"""Typed topics with Protobuf, end to end on one node: confluent-kafka's SchemaRegistryClient and
ProtobufSerializer against lakelog's HTTP port (the serializer registers the file, and its import as a
reference), records produced over Kafka to a topic with `confluent.value.schema.validation=true`; the topic's
Delta table holds the message's fields as the typed `value_typed` struct (read by delta-rs and by DuckDB); a
record whose payload is not the message is refused with INVALID_RECORD and kept out; an incompatible
evolution is refused; a consumer's ProtobufDeserializer reads `value` back. The message classes are compiled
at test time (grpcio-tools' protoc into a descriptor set, loaded into a pool of the test's own)."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from deltalake import DeltaTable
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from tests.delta_readers import duckdb_column
from tests.http import conftest as http_fixtures
from tests.kafka.typed_clients import consume_values, create_validated_topic, produce_each
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback

MONEY = 'syntax = "proto3";\npackage common;\nmessage Money { string currency = 1; int64 units = 2; }\n'
ORDER = """syntax = "proto3";
package shop;
import "common/money.proto";
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  string item = 2;
  repeated string tags = 3;
  common.Money price = 4;
  google.protobuf.Timestamp at = 5;
  Status status = 6;
  map<string, int32> counts = 7;
  enum Status { NEW = 0; PAID = 1; }
}
"""
AT = datetime.datetime(2026, 11, 26, 3, 0, 0, 250_000, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def order_class(tmp_path_factory: pytest.TempPathFactory) -> type:
    """shop.Order as a message class, compiled now (no generated code in the repository)."""
    root = tmp_path_factory.mktemp("protos")
    (root / "common").mkdir()
    (root / "common" / "money.proto").write_text(MONEY)
    (root / "shop").mkdir()
    (root / "shop" / "order.proto").write_text(ORDER)
    out = root / "set.pb"
    import grpc_tools
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={root}", f"--proto_path={well_known}",
                    f"--descriptor_set_out={out}", "--include_imports", "shop/order.proto"],
                   check=True, timeout=STUCK_S)
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    for file in files.file:
        if file.name != "google/protobuf/timestamp.proto":
            pool.AddSerializedFile(file.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def test_protobuf_records_land_as_typed_columns(start_server, order_class) -> None:
    server = start_server()
    create_validated_topic(server.bootstrap, "orders")
    registry = SchemaRegistryClient({"url": server.url})
    context = SerializationContext("orders", MessageField.VALUE)
    serialize = ProtobufSerializer(order_class, registry, {"use.deprecated.format": False})
    first = order_class(id=7, item="lamp", tags=["home", "light"], status=order_class.Status.Value("PAID"))
    first.at.FromDatetime(AT)
    first.price.currency, first.price.units = "EUR", 30
    first.counts["boxes"] = 2
    second = order_class(id=8, item="desk")  # defaults and absent messages read null, as in Spark
    sent = [serialize(first, context), serialize(second, context)]
    assert registry.get_subjects() == ["common/money.proto", "orders-value"]  # the import, as a reference

    bad_payload = sent[0][:6] + b"\xff\xff\xff"  # the right schema id and message index, then no Order
    errors = produce_each(server.bootstrap, "orders", [sent[0], bad_payload, b"not protobuf", sent[1]])
    assert errors[0] is None and errors[3] is None
    assert [e.code() for e in errors[1:3]] == [KafkaError.INVALID_RECORD] * 2  # kept out of the table

    expected = [
        {"id": 7, "item": "lamp", "tags": ["home", "light"], "price": {"currency": "EUR", "units": 30}, "at": AT,
         "status": "PAID", "counts": [("boxes", 2)]},
        {"id": 8, "item": "desk", "tags": [], "price": None, "at": None, "status": None, "counts": []},
    ]
    server.settle()  # the table is committed behind the journal's acknowledgement
    table = DeltaTable(f"{server.root}/topics/orders").to_pyarrow_table().sort_by("offset")
    assert table.column("value").to_pylist() == sent
    assert table.column("value_typed").to_pylist() == expected
    ducked = duckdb_column(server.root, "orders", "value_typed")
    assert ducked[(0, 0)]["price"] == {"currency": "EUR", "units": 30}
    assert ducked[(0, 0)]["tags"] == ["home", "light"] and ducked[(0, 1)]["item"] == "desk"
    assert ducked[(0, 0)]["at"].astimezone(datetime.timezone.utc) == AT
    assert_topic_intact(server.root, "orders")

    incompatible = ORDER.replace("int64 id = 1;", "string id = 1;")
    with pytest.raises(SchemaRegistryError) as refused:
        registry.register_schema("orders-value", Schema(incompatible, "PROTOBUF", [
            SchemaReference("common/money.proto", "common/money.proto", 1)]))
    assert refused.value.http_status_code == 409 and "FIELD_SCALAR_KIND_CHANGED" in refused.value.error_message

    received = consume_values(server.bootstrap, "orders", 2)
    assert received == sent  # byte for byte
    deserialize = ProtobufDeserializer(order_class, {"use.deprecated.format": False})
    assert deserialize(received[0], context) == first
