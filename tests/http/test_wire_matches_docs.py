"""The documented models are what the server sends: answers validated against them, extra fields refused."""

from __future__ import annotations

import base64

import httpx

from lakelog.ingest_api.models import ErrorResponse, FetchResponse, ProduceResponse
from lakelog.platform.records import IDEMPOTENCY_BASE
from tests.http.conftest import create_topic, free_port
from tests.patience import STUCK_S


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


def documented_error(document: dict, method: str, path: str, status: int) -> dict:
    """The documented answer of one operation for one error status: the ErrorResponse model, an example."""
    answer = document["paths"][path][method]["responses"][str(status)]
    content = answer["content"]["application/json"]
    assert content["schema"] == {"$ref": "#/components/schemas/ErrorResponse"}
    ErrorResponse.model_validate(content["example"])  # the example has the shape too
    return answer


def check_error(document: dict, answer: httpx.Response, method: str, path: str, status: int, code: str) -> None:
    assert answer.status_code == status, answer.text
    parsed = ErrorResponse.model_validate(answer.json())  # extra or missing fields would fail here
    assert parsed.error_code == code
    documented_error(document, method, path, status)


def test_error_answers_match_the_documented_error_model(client: httpx.Client, topic_name: str) -> None:
    document = client.get("/openapi.json").json()
    assert "HTTPValidationError" not in document["components"]["schemas"]  # a shape the server never sends
    create_topic(client, topic_name, 1)
    topics, records = "/v1/topics", "/v1/topics/{topic}/records"
    fetch = "/v1/topics/{topic}/partitions/{partition}/records"
    check_error(document, client.post(topics, content=b"{not json", headers={"content-type": "application/json"}),
                "post", topics, 400, "INVALID_REQUEST")
    check_error(document, client.post(topics, json={"name": topic_name, "partitions": 1}),
                "post", topics, 409, "TOPIC_ALREADY_EXISTS")
    check_error(document, client.post(topics, json={"name": "x", "partitions": "many"}),
                "post", topics, 422, "INVALID_REQUEST")
    check_error(document, client.get(f"/v1/topics/{topic_name}-missing"), "get", "/v1/topics/{topic}", 404,
                "UNKNOWN_TOPIC_OR_PARTITION")
    check_error(document, client.post(f"/v1/topics/{topic_name}/records", content=b"a,b",
                                      headers={"content-type": "text/csv"}), "post", records, 415, "INVALID_REQUEST")
    out_of_range = client.get(f"/v1/topics/{topic_name}/partitions/0/records", params={"offset": 5})
    check_error(document, out_of_range, "get", fetch, 409, "OFFSET_OUT_OF_RANGE")
    assert (out_of_range.json()["log_start_offset"], out_of_range.json()["log_end_offset"]) == (0, 0)
    assert documented_error(document, "get", fetch, 409)["content"]["application/json"]["example"][
        "error_code"] == "OFFSET_OUT_OF_RANGE"
    documented_error(document, "post", records, 413)
    documented_error(document, "post", records, 429)
    documented_error(document, "get", "/readyz", 503)


def test_auth_and_limit_errors_match_the_documented_error_model(start_server) -> None:
    server = start_server(api_keys_json='{"k-admin": "admin", "k-alice": "alice"}', max_request_bytes=100)
    admin = server.client(headers={"Authorization": "Bearer k-admin"})
    document = admin.get("/openapi.json").json()
    create_topic(admin, "t", 1)
    records = "/v1/topics/{topic}/records"
    check_error(document, httpx.get(server.url + "/v1/topics/t", timeout=STUCK_S), "get", "/v1/topics/{topic}", 401,
                "SASL_AUTHENTICATION_FAILED")
    alice = server.client(headers={"Authorization": "Bearer k-alice"})
    check_error(document, alice.post("/v1/topics/t/records", json={"records": [{"value": "x"}]}),
                "post", records, 403, "TOPIC_AUTHORIZATION_FAILED")
    check_error(document, admin.post("/v1/topics/t/records", json={"records": [{"value": "x" * 200}]}),
                "post", records, 413, "RECORD_LIST_TOO_LARGE")
    check_error(document, alice.get("/metrics"), "get", "/metrics", 403, "CLUSTER_AUTHORIZATION_FAILED")


def test_storage_errors_match_the_documented_error_model(start_server) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens: the store is down
    server = start_server("s3://down/root", storage={"aws_endpoint_url": endpoint, "aws_region": "us-east-1",
                                                     "aws_access_key_id": "k", "aws_secret_access_key": "s",
                                                     "max_retries": "0"})
    with server.client() as client:
        document = client.get("/openapi.json").json()
        check_error(document, client.get("/readyz"), "get", "/readyz", 503, "KAFKA_STORAGE_ERROR")
        check_error(document, client.get("/v1/topics"), "get", "/v1/topics", 503, "KAFKA_STORAGE_ERROR")
        assert client.get("/v1/topics").headers["retry-after"] == "1"


def test_descriptions_hold_no_implementation_notes(client: httpx.Client) -> None:
    document = client.get("/openapi.json").json()
    texts = [operation.get("description", "") + operation.get("summary", "")
             for operations in document["paths"].values() for operation in operations.values()]
    assert not [text for text in texts if any(note in text for note in ("hot path", "dependency", "worker thread"))]
