"""Bad input: a clear JSON error with a fitting status, and nothing written."""

from __future__ import annotations

import httpx
import pytest

from tests.http.conftest import create_topic, end_offsets


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) >= {"error_code", "message", "retriable"}
    assert isinstance(body["message"], str) and body["message"]
    if code is not None:
        assert body["error_code"] == code
    return body


BAD_BODIES = [
    (b'{"records": [{"value": "x"}', "application/json", 400, "INVALID_REQUEST"),
    (b'{"records": [{"value": "!!!"}], "value_format": "base64"}', "application/json", 400, "INVALID_REQUEST"),
    (b'{"records": [{"value": "x", "colour": "red"}]}', "application/json", 422, "INVALID_REQUEST"),
    (b'{"records": [{"value": "x"}], "extra": 1}', "application/json", 422, "INVALID_REQUEST"),
    (b'{"records": []}', "application/json", 422, "INVALID_REQUEST"),
    (b'{"records": [{"value": 5}]}', "application/json", 422, "INVALID_REQUEST"),
    (b'{"records": [{"value": "x", "partition": -1}]}', "application/json", 422, "INVALID_REQUEST"),
    (b'{"records": [{"value": "x", "partition": 9}]}', "application/json", 404, "UNKNOWN_TOPIC_OR_PARTITION"),
    (b'{"records": [{"value": "x", "timestamp": "now"}]}', "application/json", 422, "INVALID_REQUEST"),
    (b'{"records": [{"value": "x", "headers": [{"key": 1}]}]}', "application/json", 422, "INVALID_REQUEST"),
    (b'{"records": [{"value": "x"}], "producer_id": 1}', "application/json", 422, "INVALID_REQUEST"),
    (b'[1, 2]', "application/json", 422, "INVALID_REQUEST"),
    (b'{"value": "ok"}\n{not json', "application/x-ndjson", 400, "INVALID_REQUEST"),
    (b"not an arrow stream", "application/vnd.apache.arrow.stream", 400, "INVALID_REQUEST"),
    (b"value=x", "text/plain", 415, "INVALID_REQUEST"),
]


@pytest.mark.parametrize("body,content_type,status,code", BAD_BODIES)
def test_bad_produce_bodies_are_refused_and_write_nothing(client: httpx.Client, topic_name: str, body: bytes,
                                                          content_type: str, status: int, code: str) -> None:
    create_topic(client, topic_name, 2)
    response = client.post(f"/v1/topics/{topic_name}/records", content=body, headers={"content-type": content_type})
    assert_error(response, status, code)
    assert end_offsets(client, topic_name) == [0, 0]


def test_one_bad_record_in_a_batch_writes_none(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 1)
    records = [{"value": "fine"}] * 10 + [{"value": "x", "partition": 5}]
    assert_error(client.post(f"/v1/topics/{topic_name}/records", json={"records": records}), 404)
    assert end_offsets(client, topic_name) == [0]


def test_record_over_max_message_bytes_is_413_naming_the_limit(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 1, **{"max.message.bytes": 100})
    response = client.post(f"/v1/topics/{topic_name}/records",
                           json={"records": [{"value": "small"}, {"value": "y" * 500}]})
    body = assert_error(response, 413, "MESSAGE_TOO_LARGE")
    assert "max.message.bytes" in body["message"] and "100" in body["message"]
    assert end_offsets(client, topic_name) == [0]


def test_body_over_max_request_bytes_is_413(start_server, topic_name: str) -> None:
    server = start_server(max_request_bytes=2000)
    with server.client() as c:
        create_topic(c, topic_name, 1)
        response = c.post(f"/v1/topics/{topic_name}/records", json={"records": [{"value": "z" * 5000}]})
        body = assert_error(response, 413, "RECORD_LIST_TOO_LARGE")
        assert "max_request_bytes" in body["message"] and "2000" in body["message"]
        assert end_offsets(c, topic_name) == [0]


def test_deadline_passed_is_503_with_retry_after(start_server, topic_name: str) -> None:
    # With no linger, a local folder's journal put can land within 1 ms; a 200 ms linger makes the call wait
    # for its flush, so timeout_ms=1 expires before it: a retriable 503 and nothing written.
    server = start_server(linger_ms=200)
    with server.client() as client:
        create_topic(client, topic_name, 1)
        response = client.post(f"/v1/topics/{topic_name}/records", json={"records": [{"value": "late"}]},
                               params={"timeout_ms": 1})
        body = assert_error(response, 503, "REQUEST_TIMED_OUT")
        assert body["retriable"] is True
        assert response.headers["retry-after"]
        assert end_offsets(client, topic_name) == [0]


def test_fetch_errors(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 1)
    client.post(f"/v1/topics/{topic_name}/records", json={"records": [{"value": "a"}]})
    base = f"/v1/topics/{topic_name}/partitions"
    body = assert_error(client.get(f"{base}/0/records", params={"offset": 5}), 409, "OFFSET_OUT_OF_RANGE")
    assert (body["log_start_offset"], body["log_end_offset"]) == (0, 1)
    assert_error(client.get(f"{base}/3/records", params={"offset": 0}), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    assert_error(client.get("/v1/topics/nope-nope/partitions/0/records", params={"offset": 0}), 404)
    assert_error(client.get(f"{base}/0/records", params={"offset": -1}), 422)
    assert_error(client.get(f"{base}/0/records"), 422)
    assert_error(client.get(f"{base}/0/offsets", params={"spec": "yesterday"}), 422)


def test_admin_errors(client: httpx.Client, topic_name: str) -> None:
    assert_error(client.post("/v1/topics", json={"name": "bad name!", "partitions": 1}), 422)
    assert_error(client.post("/v1/topics", json={"name": topic_name, "partitions": 0}), 422)
    assert_error(client.post("/v1/topics", json={"name": topic_name, "config": {"retention.mss": 1}}), 422,
                 "INVALID_CONFIG")
    assert_error(client.post("/v1/topics", content=b"{", headers={"content-type": "application/json"}), 400)
    assert topic_name not in [t["name"] for t in client.get("/v1/topics").json()["topics"]]
    assert_error(client.patch("/v1/topics/missing-topic/config", json={"config": {"retention.ms": 1}}), 404)
    assert_error(client.delete("/v1/topics/missing-topic"), 404)
    assert_error(client.get("/v1/no-such-route"), 404)


def test_server_survives_garbage(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 1)
    for body in (b"\x00" * 100, b"{" * 10000, b'{"records": [' + b"{}," * 1000 + b"7]}", "\ud800".encode(
            "utf-8", "surrogatepass")):
        response = client.post(f"/v1/topics/{topic_name}/records", content=body,
                               headers={"content-type": "application/json"})
        assert 400 <= response.status_code < 500, response.text[:300]
    assert client.get("/healthz").status_code == 200
    assert end_offsets(client, topic_name) == [0]
