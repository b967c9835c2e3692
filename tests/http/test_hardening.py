"""Regression tests of the hardening issue, against a real server: bad timestamps, topic-admin races,
leniencies that became clear errors (strict types, Arrow bodies, Idempotency-Key content, byte budget)."""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pyarrow as pa
import pytest

from log_check import assert_topic_intact
from tests.http.conftest import create_topic, end_offsets, fetch_all
from tests.http.test_errors import assert_error

ARROW = "application/vnd.apache.arrow.stream"


def arrow_body(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


# ---- 1. timestamps --------------------------------------------------------------------------------


@pytest.mark.parametrize("timestamp", [253402300800000, 2**53, 2**62])
def test_a_timestamp_too_large_to_store_is_422_and_the_next_record_gets_offset_0(
        start_server, timestamp: int) -> None:
    """The issue's reproduction: the first request used to land, answer 500, and leave offset 0 reusable."""
    server = start_server()
    with server.client() as c:
        create_topic(c, "t", 1)
        response = c.post("/v1/topics/t/records", json={"records": [{"value": "ok"}, {"value": "x",
                                                                                     "timestamp": timestamp}]})
        body = assert_error(response, 422, "INVALID_TIMESTAMP")
        assert "record 1" in body["message"] and "253402300799999" in body["message"]
        answer = c.post("/v1/topics/t/records", json={"records": [{"value": "y"}]})
        assert answer.status_code == 200 and answer.json()["offsets"][0]["offset"] == 0
        assert [r["value"] for r in fetch_all(c, "t", 0)] == ["y"]
    server.settle()  # the table is committed behind the acknowledgement
    assert_topic_intact(server.settings.root, "t")


# ---- 2. topic admin -------------------------------------------------------------------------------


def test_concurrent_creates_of_one_name_one_wins_the_others_409(start_server) -> None:
    server = start_server()
    barrier = threading.Barrier(6)

    def create(partitions: int) -> httpx.Response:
        with server.client() as c:
            barrier.wait()
            return c.post("/v1/topics", json={"name": "race", "partitions": partitions})

    for round_ in range(3):
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(create, range(1, 7)))
        codes = sorted(a.status_code for a in answers)
        assert codes == [201, 409, 409, 409, 409, 409], [a.text for a in answers]
        assert {a.json()["error_code"] for a in answers if a.status_code == 409} == {"TOPIC_ALREADY_EXISTS"}
        winner = next(a.json() for a in answers if a.status_code == 201)
        with server.client() as c:
            assert len(c.get("/v1/topics/race").json()["partitions"]) == len(winner["partitions"])
            c.post("/v1/topics/race/records", json={"records": [{"value": "kept", "partition": 0}]})
            assert [r["value"] for r in fetch_all(c, "race", 0)] == ["kept"]
            server.settle()  # the table is committed behind the acknowledgement
            assert_topic_intact(server.settings.root, "race")
            assert c.delete("/v1/topics/race").status_code == 200
        barrier.reset()


def test_concurrent_partition_increases_never_decrease_the_count(start_server) -> None:
    server = start_server()
    with server.client() as c:
        create_topic(c, "grow", 1)
    barrier = threading.Barrier(2)

    def grow(total: int) -> httpx.Response:
        with server.client() as c:
            barrier.wait()
            return c.post("/v1/topics/grow/partitions", json={"partitions": total})

    with ThreadPoolExecutor(2) as pool:
        to8, to4 = pool.map(grow, [8, 4])
    with server.client() as c:
        final = len(c.get("/v1/topics/grow").json()["partitions"])
        written = c.post("/v1/topics/grow/records", json={"records": [{"value": "x", "partition": p}
                                                                     for p in range(final)]})
    assert to8.status_code == 200, to8.text
    assert final == 8 and written.status_code == 200, written.text
    server.settle()  # the table is committed behind the acknowledgement
    assert sorted(assert_topic_intact(server.settings.root, "grow")) == list(range(8))
    # Whichever came second: 4 after 8 is refused; 4 before 8 was fine and 8 then grew it.
    assert to4.status_code in (200, 422)
    if to4.status_code == 422:
        assert to4.json()["error_code"] == "INVALID_PARTITIONS"


# ---- 4. leniencies --------------------------------------------------------------------------------


@pytest.mark.parametrize("body,where", [
    ({"name": "strict-a", "partitions": True}, "partitions"),
    ({"name": "strict-b", "partitions": 2.0}, "partitions"),
    ({"name": "strict-c", "partitions": "2"}, "partitions"),
    ({"name": "strict-d", "config": {"retention.ms": 2**70}}, "retention.ms"),
    ({"name": "strict-e", "config": {"retention.ms": True}}, "retention.ms"),
    ({"name": "strict-f", "config": {"segment.bytes": 2**31}}, "segment.bytes"),
    ({"name": "strict-g", "config": {"max.message.bytes": 1.5}}, "max.message.bytes"),
])
def test_topic_admin_types_and_ranges_are_strict(client: httpx.Client, body: dict, where: str) -> None:
    answer = assert_error(client.post("/v1/topics", json=body), 422)
    assert where in answer["message"]
    assert client.get(f"/v1/topics/{body['name']}").status_code == 404


def test_kafka_config_strings_are_still_numbers(client: httpx.Client, topic_name: str) -> None:
    created = client.post("/v1/topics", json={"name": topic_name, "config": {"retention.ms": "3600000"}})
    assert created.status_code == 201, created.text
    assert created.json()["config"]["retention.ms"] == 3600000


def test_arrow_partition_column_must_be_integers(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 2)
    table = pa.table({"value": pa.array([b"a"]), "partition": pa.array(["1"])})
    response = client.post(f"/v1/topics/{topic_name}/records", content=arrow_body(table),
                           headers={"content-type": ARROW})
    assert "partition column must be integers" in assert_error(response, 422, "INVALID_RECORD")["message"]
    assert end_offsets(client, topic_name) == [0, 0]


def test_arrow_stream_with_trailing_bytes_is_refused(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 1)
    body = arrow_body(pa.table({"value": pa.array([b"a", b"b"])}))
    for tail in (b"garbage", arrow_body(pa.table({"value": pa.array([b"c"])}))):
        response = client.post(f"/v1/topics/{topic_name}/records", content=body + tail,
                               headers={"content-type": ARROW})
        assert "after the end of the Arrow stream" in assert_error(response, 400, "INVALID_REQUEST")["message"]
    assert end_offsets(client, topic_name) == [0]
    ok = client.post(f"/v1/topics/{topic_name}/records", content=body, headers={"content-type": ARROW})
    assert ok.status_code == 200, ok.text


def test_an_idempotency_key_reused_with_other_content_is_409(start_server) -> None:
    server = start_server()
    with server.client() as c:
        create_topic(c, "idem", 1)
        first = c.post("/v1/topics/idem/records", json={"records": [{"value": "a"}, {"value": "b"}]},
                       headers={"Idempotency-Key": "order-1"})
        assert first.status_code == 200
        retry = c.post("/v1/topics/idem/records", json={"records": [{"value": "a"}, {"value": "b"}]},
                       headers={"Idempotency-Key": "order-1"})
        assert retry.json() == first.json()
        other = c.post("/v1/topics/idem/records", json={"records": [{"value": "a"}, {"value": "CHANGED"}]},
                       headers={"Idempotency-Key": "order-1"})
        body = assert_error(other, 409, "IDEMPOTENCY_KEY_REUSED")
        assert "different content" in body["message"]
        assert [r["value"] for r in fetch_all(c, "idem", 0)] == ["a", "b"]
    server.stop()
    # After a restart the original content is compared from the log itself.
    restarted = start_server(server.settings.root)
    with restarted.client() as c:
        again = c.post("/v1/topics/idem/records", json={"records": [{"value": "a"}, {"value": "b"}]},
                       headers={"Idempotency-Key": "order-1"})
        assert again.json() == first.json()
        changed = c.post("/v1/topics/idem/records", json={"records": [{"value": "x"}, {"value": "b"}]},
                         headers={"Idempotency-Key": "order-1"})
        assert_error(changed, 409, "IDEMPOTENCY_KEY_REUSED")
        assert [r["value"] for r in fetch_all(c, "idem", 0)] == ["a", "b"]
    restarted.settle()  # the table is committed behind the acknowledgement
    assert_topic_intact(restarted.settings.root, "idem")


def _open_produce(port: int, topic: str, length: int) -> socket.socket:
    """A produce request whose headers declare `length` bytes, with none of the body sent yet."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(f"POST /v1/topics/{topic}/records HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode())
    return sock


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    while len(body) < int(headers.get("content-length", 0)):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def test_the_inflight_budget_is_reserved_before_the_body_is_read(start_server) -> None:
    """Bodies declared beyond the budget are refused (429, Retry-After) before a byte of them is read."""
    server = start_server(max_request_bytes=4_000_000, max_inflight_produce_bytes=5_000_000)
    with server.client() as c:
        create_topic(c, "big", 1)
    body = b'{"records": [' + b",".join([b'{"value": "' + b"v" * 99_970 + b'"}'] * 29) + b"]}"
    body += b" " * (3_000_000 - len(body))
    first = _open_produce(server.port, "big", len(body))  # holds 3 MB of the 5 MB budget, sends nothing yet
    time.sleep(0.3)
    second = _open_produce(server.port, "big", len(body))
    status, headers, answer = _answer(second)
    assert status == 429 and json.loads(answer)["error_code"] == "THROTTLING_QUOTA_EXCEEDED"
    assert headers["retry-after"]
    assert "max_inflight_produce_bytes" in json.loads(answer)["message"]
    first.sendall(body)
    status, _, answer = _answer(first)
    assert status == 200, answer
    first.close()
    second.close()
    third = _open_produce(server.port, "big", len(body))  # the budget is free again
    third.sendall(body)
    assert _answer(third)[0] == 200
    third.close()
    with server.client() as c:
        assert end_offsets(c, "big") == [58]
    assert server.app.state.services.inflight_bytes == 0
