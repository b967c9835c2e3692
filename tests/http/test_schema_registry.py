"""The schema registry over HTTP, driven by confluent-kafka's SchemaRegistryClient and its Avro serdes."""

from __future__ import annotations

import base64
import json
import threading

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2

from lakelog.platform.schema_registry import SchemaRegistry
from lakelog.platform.storage import Storage

V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "age", "type": "int", "default": 0}]}
V3 = {**V1, "fields": [*V2["fields"], {"name": "email", "type": ["null", "string"], "default": None}]}
BAD = {**V1, "fields": [*V1["fields"], {"name": "country", "type": "string"}]}  # no default: not BACKWARD


def avro(schema: dict) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


def test_confluent_client_avro_evolution_and_serdes(start_server):
    server = start_server()
    client = SchemaRegistryClient({"url": server.url})
    first = client.register_schema("users-value", avro(V1))
    assert client.register_schema("users-value", avro(V1)) == first  # the same schema: the same id
    assert json.loads(client.get_schema(first).schema_str) == V1
    second = client.register_schema("users-value", avro(V2))
    third = client.register_schema("users-value", avro(V3))
    assert len({first, second, third}) == 3
    assert client.get_versions("users-value") == [1, 2, 3]
    assert client.get_latest_version("users-value").schema_id == third
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("users-value", avro(BAD))
    assert refused.value.http_status_code == 409 and refused.value.error_code == 409
    assert not client.test_compatibility("users-value", avro(BAD))
    assert client.test_compatibility("users-value", avro(V3))
    assert client.lookup_schema("users-value", avro(V2)).version == 2
    with pytest.raises(SchemaRegistryError) as missing:
        client.get_latest_version("nobody")
    assert missing.value.error_code == 40401

    serializer = AvroSerializer(client, json.dumps(V3))
    deserializer = AvroDeserializer(client)
    context = SerializationContext("users", MessageField.VALUE)
    record = {"name": "ada", "age": 36, "email": "ada@example.com"}
    data = serializer(record, context)
    assert int.from_bytes(data[1:5], "big") == third  # Confluent's wire format: magic byte, schema id
    assert deserializer(data, context) == record


def test_http_json_schema_config_mode_and_errors(start_server):
    server = start_server()
    ctype = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    closed = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
    added = {**closed, "properties": {**closed["properties"], "b": {"type": "integer"}}}
    narrowed = {**closed, "properties": {"a": {"type": "integer"}}}
    with server.client() as http:
        def post(path, schema, **kw):
            return http.post(path, headers=ctype, json={"schema": json.dumps(schema), "schemaType": "JSON"}, **kw)

        assert post("/subjects/j/versions", closed).json() == {"id": 1}
        answer = http.get("/subjects/j/versions/latest")
        assert answer.headers["content-type"] == "application/vnd.schemaregistry.v1+json"
        assert answer.json()["schemaType"] == "JSON" and answer.json()["version"] == 1
        check = post("/compatibility/subjects/j/versions/latest", narrowed, params={"verbose": "true"}).json()
        assert check["is_compatible"] is False and check["messages"]
        assert post("/compatibility/subjects/j/versions/latest", added).json() == {"is_compatible": True}
        assert post("/subjects/j/versions", narrowed).status_code == 409
        assert post("/subjects/j/versions", added).json() == {"id": 2}
        assert http.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
        assert http.put("/config/j", json={"compatibility": "NONE"}).json() == {"compatibility": "NONE"}
        assert http.get("/config/j").json() == {"compatibilityLevel": "NONE"}
        assert post("/subjects/j/versions", narrowed).json() == {"id": 3}
        assert http.delete("/config/j").json() == {"compatibilityLevel": "NONE"}
        assert http.get("/config/j").json()["error_code"] == 40408
        assert http.put("/config", json={"compatibility": "SIDEWAYS"}).json()["error_code"] == 42203
        assert http.get("/subjects/j/versions/x").json()["error_code"] == 42202
        assert http.get("/subjects/j/versions/9").json()["error_code"] == 40402
        assert http.get("/schemas/ids/99").json()["error_code"] == 40403
        assert http.post("/subjects/j/versions", json={"schema": "{not json"}).json()["error_code"] == 42201
        # soft delete, then permanent
        assert http.delete("/subjects/j/versions/3", params={"permanent": "true"}).json()["error_code"] == 40407
        assert http.delete("/subjects/j/versions/3").json() == 3
        assert http.get("/subjects/j/versions").json() == [1, 2]
        assert http.delete("/subjects/j/versions/3", params={"permanent": "true"}).json() == 3
        assert http.delete("/subjects/j").json() == [1, 2]
        assert http.get("/subjects").json() == []
        assert http.get("/subjects", params={"deleted": "true"}).json() == ["j"]
        assert http.delete("/subjects/j").json()["error_code"] == 40404
        assert http.delete("/subjects/j", params={"permanent": "true"}).json() == [1, 2]
        assert http.get("/schemas/ids/1").json()["schemaType"] == "JSON"  # ids outlive their subjects
        assert http.get("/schemas/types").json() == ["JSON", "PROTOBUF", "AVRO"]
        # references, and the read-only mode
        assert post("/subjects/base/versions", closed).json() == {"id": 1}
        ref = [{"name": "base.json", "subject": "base", "version": 1}]
        body = {"schema": json.dumps({"$ref": "base.json"}), "schemaType": "JSON", "references": ref}
        assert http.post("/subjects/top/versions", json=body).status_code == 200
        assert http.get("/subjects/top/versions/1").json()["references"] == ref
        assert http.delete("/subjects/base/versions/1").json()["error_code"] == 42206
        assert http.put("/mode", json={"mode": "READONLY"}).json() == {"mode": "READONLY"}
        assert post("/subjects/k/versions", closed).json()["error_code"] == 42205
        assert http.put("/mode", json={"mode": "READWRITE"}).json() == {"mode": "READWRITE"}


def test_acls_apply_to_subjects(start_server):
    server = start_server(api_keys_json=json.dumps({"admin-key": "admin", "alice-key": "alice"}))
    schema = {"schema": json.dumps(V1)}
    with server.client(headers={"Authorization": "Bearer admin-key"}) as admin, \
            server.client(headers={"Authorization": "Bearer alice-key"}) as alice:
        assert server.client().get("/subjects").json()["error_code"] == 40101
        refused = alice.post("/subjects/s/versions", json=schema)
        assert refused.status_code == 403 and refused.json()["error_code"] == 40301
        acl = {"principal": "alice", "resource_type": "subject", "pattern_type": "literal", "resource_name": "s",
               "operation": "write"}
        assert admin.post("/v1/acls", json={"acls": [acl]}).status_code in (200, 201)
        assert alice.post("/subjects/s/versions", json=schema).json() == {"id": 1}
        assert alice.get("/subjects").json() == ["s"]  # write implies describe
        assert alice.delete("/subjects/s").status_code == 403
        assert admin.delete("/subjects/s").json() == [1]


def test_two_registries_on_one_root_give_different_ids(tmp_path):
    storage = Storage.open(str(tmp_path))
    nodes = [SchemaRegistry(storage), SchemaRegistry(Storage.open(str(tmp_path)))]
    ids: dict[str, int] = {}

    def register(node: SchemaRegistry, name: str) -> None:
        for i in range(5):
            subject = f"{name}-{i}"
            ids[subject] = node.register(subject, json.dumps({**V1, "name": f"{name}{i}"}))

    threads = [threading.Thread(target=register, args=(node, f"n{k}")) for k, node in enumerate(nodes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(ids.values()) == list(range(1, 11))  # dense, one id per schema
    for node in nodes:
        for subject, schema_id in ids.items():
            assert node.version(subject, "latest")["id"] == schema_id


def test_protobuf_text_references_and_the_serialized_format(start_server):
    """.proto text over REST: an import registered under a subject holding "/" (as Protobuf serializers name
    references), compatibility by Confluent's Protobuf rules, and `format=serialized` for Protobuf deserializers."""
    server = start_server()
    money = 'syntax = "proto3"; package common; message Money { string currency = 1; int64 units = 2; }'
    order = ('syntax = "proto3"; package shop; import "common/money.proto"; '
             "message Order { int64 id = 1; common.Money price = 2; }")
    ref = [{"name": "common/money.proto", "subject": "common/money.proto", "version": 1}]
    with server.client() as http:
        assert http.post("/subjects/common%2Fmoney.proto/versions",
                         json={"schema": money, "schemaType": "PROTOBUF"}).status_code == 200
        assert http.get("/subjects/common%2Fmoney.proto/versions").json() == [1]
        answer = http.post("/subjects/orders-value/versions",
                           json={"schema": order, "schemaType": "PROTOBUF", "references": ref})
        assert answer.status_code == 200, answer.text
        schema_id = answer.json()["id"]
        assert http.get(f"/schemas/ids/{schema_id}").json()["schema"] == order  # as registered
        for path in (f"/schemas/ids/{schema_id}", "/subjects/orders-value/versions/1"):
            served = http.get(path, params={"format": "serialized"}).json()["schema"]
            proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(served))
            assert proto.package == "shop" and [m.name for m in proto.message_type] == ["Order"]
        renamed = order.replace("int64 id = 1;", "int64 order_id = 1; string note = 3;")
        check = http.post("/compatibility/subjects/orders-value/versions/latest?verbose=true",
                          json={"schema": renamed, "schemaType": "PROTOBUF", "references": ref})
        assert check.json()["is_compatible"] is True, check.text
        broken = order.replace("common.Money price = 2;", "string price = 2;")
        refused = http.post("/subjects/orders-value/versions",
                            json={"schema": broken, "schemaType": "PROTOBUF", "references": ref})
        assert refused.status_code == 409 and "FIELD_KIND_CHANGED" in refused.json()["message"]
        invalid = http.post("/subjects/bad-value/versions", json={"schema": "syntax = \"proto3\"; message {",
                                                                 "schemaType": "PROTOBUF"})
        assert invalid.status_code == 422 and "protoc" in invalid.json()["message"]
        assert http.delete("/subjects/common%2Fmoney.proto/versions/1").status_code == 422  # still referenced
