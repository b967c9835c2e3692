"""The documented models are what the server sends: answers validated against them, extra fields refused."""

from __future__ import annotations

import base64

import httpx

from lakelog.ingest_api.models import FetchResponse, ProduceResponse
from lakelog.platform.records import IDEMPOTENCY_BASE
from tests.http.conftest import create_topic


def test_fetch_answers_in_every_format_match_the_fetch_model(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 1)
    values = [b"\xff\xfe binary", b"plain text", b'{"json": true}']
    produced = client.post(f"/v1/topics/{topic_name}/records", json={
        "value_format": "base64", "key_format": "base64",
        "records": [{"key": base64.b64encode(v).decode(), "value": base64.b64encode(v).decode()} for v in values]})
    ProduceResponse.model_validate(produced.json())
    client.post(f"/v1/topics/{topic_name}/records", json={"records": [
        {"value": "h", "headers": [{"key": "text", "value": "ok"}]}]})
    seen_encodings: set[str] = set()
    for fmt in ("string", "base64", "json"):
        answer = client.get(f"/v1/topics/{topic_name}/partitions/0/records",
                            params={"offset": 0, "key_format": fmt, "value_format": fmt})
        assert answer.status_code == 200
        parsed = FetchResponse.model_validate(answer.json())  # unknown fields or values would fail here
        seen_encodings |= {r.value_encoding for r in parsed.records if r.value_encoding}
    assert seen_encodings == {"base64", "string"}  # both documented values really occur


def test_the_documented_producer_id_range_is_the_accepted_one(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 1)
    document = client.get("/openapi.json").json()
    documented = document["components"]["schemas"]["ProduceRequest"]["properties"]["producer_id"]
    upper = next(option["maximum"] for option in documented["anyOf"] if "maximum" in option)
    assert upper == IDEMPOTENCY_BASE - 1
    body = {"records": [{"value": "x"}], "producer_epoch": 0, "sequence": 0}
    ok = client.post(f"/v1/topics/{topic_name}/records", json={**body, "producer_id": upper})
    refused = client.post(f"/v1/topics/{topic_name}/records", json={**body, "producer_id": upper + 1})
    assert ok.status_code == 200 and refused.status_code == 422
