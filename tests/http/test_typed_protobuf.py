"""Typed topics with Protobuf over HTTP: a `.proto` text schema registered over REST, embedded JSON
(`value_format=json`) converted with it, a payload that is not the message dead-lettered with its reason, and
the fields answered by fetch with `value_typed=true` and stored in the table's `value_typed`."""

from __future__ import annotations

import base64

from deltalake import DeltaTable

from tests.http.conftest import create_topic, fetch_all
from tests.log_check import assert_topic_intact

EVENT = 'syntax = "proto3"; package ev; message Event { int64 id = 1; string kind = 2; repeated int32 sizes = 3; }'


def test_protobuf_embedded_json_dead_letters_and_fields(start_server) -> None:
    server = start_server()
    with server.client() as http:
        registered = http.post("/subjects/events-value/versions", json={"schema": EVENT, "schemaType": "PROTOBUF"})
        assert registered.status_code == 200, registered.text
        schema_id = registered.json()["id"]
        create_topic(http, "events", **{"confluent.value.schema.validation": True,
                                        "errors.deadletterqueue.topic.name": "events-dlq"})
        create_topic(http, "events-dlq")
        answer = http.post("/v1/topics/events/records", json={"value_format": "json", "records": [
            {"value": {"id": "5", "kind": "click", "sizes": [1, 2]}}, {"value": {"id": 6, "colour": "red"}}]})
        assert answer.status_code == 200, answer.text
        assert [o["offset"] for o in answer.json()["offsets"]] == [0, -1]
        assert "does not convert" in answer.json()["dead_letters"][0]["reason"]

        not_the_message = b"\x00" + schema_id.to_bytes(4, "big") + b"\x00\xff\xff"  # indexes [0], then no Event
        raw = http.post("/v1/topics/events/records", json={"value_format": "base64", "records": [
            {"value": base64.b64encode(not_the_message).decode()}]})
        assert raw.status_code == 200, raw.text
        (letter,) = raw.json()["dead_letters"]
        assert "(PROTOBUF)" in letter["reason"]

        fetched = http.get("/v1/topics/events/partitions/0/records", params={"offset": 0, "value_typed": "true"})
        assert fetched.status_code == 200, fetched.text
        assert [r["value_typed"] for r in fetched.json()["records"]] == [{"id": 5, "kind": "click", "sizes": [1, 2]}]
        dead = fetch_all(http, "events-dlq", 0, value_format="base64")
        assert len(dead) == 2 and base64.b64decode(dead[1]["value"]) == not_the_message
    server.settle()  # the table is committed behind the journal's acknowledgement
    table = DeltaTable(f"{server.root}/topics/events").to_pyarrow_table(columns=["offset", "value_typed"])
    assert table.column("value_typed").to_pylist() == [{"id": 5, "kind": "click", "sizes": [1, 2]}]
    assert_topic_intact(server.root, "events")
    assert_topic_intact(server.root, "events-dlq")
