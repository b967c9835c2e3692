"""Produce and fetch round trips in every format, acks levels, idempotent retries, topic admin."""

from __future__ import annotations

import base64
import threading
import time

import httpx
import pyarrow as pa
import pytest

from tests.http.conftest import create_topic, end_offsets, fetch_all
from tests.patience import STUCK_S

ARROW = "application/vnd.apache.arrow.stream"


def produce(client: httpx.Client, topic: str, body: dict, **params: object) -> httpx.Response:
    return client.post(f"/v1/topics/{topic}/records", json=body, params=params)


def test_json_string_round_trip_keeps_keys_values_headers_timestamps(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 3)
    records = [{"key": f"k{i}", "value": f"välue {i}", "headers": [{"key": "h", "value": str(i)}],
                "timestamp": 1_700_000_000_000 + i} for i in range(20)]
    response = produce(client, topic_name, {"records": records})
    assert response.status_code == 200, response.text
    offsets = response.json()["offsets"]
    assert len(offsets) == 20
    by_partition: dict[int, list[dict]] = {}
    for sent, where in zip(records, offsets):
        by_partition.setdefault(where["partition"], []).append({**sent, **where})
    for partition, expected in by_partition.items():
        fetched = fetch_all(client, topic_name, partition)
        assert [r["offset"] for r in fetched] == [e["offset"] for e in expected]
        assert [(r["key"], r["value"], r["timestamp"]) for r in fetched] == \
               [(e["key"], e["value"], e["timestamp"]) for e in expected]
        assert [r["headers"] for r in fetched] == [e["headers"] for e in expected]
        assert all(r["topic"] == topic_name and r["partition"] == partition for r in fetched)


def test_same_key_same_partition_and_explicit_partition(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 4)
    response = produce(client, topic_name, {"records": [{"key": "same", "value": str(i)} for i in range(5)]
                                            + [{"value": "pinned", "partition": 3}]})
    offsets = response.json()["offsets"]
    assert len({o["partition"] for o in offsets[:5]}) == 1
    assert offsets[5]["partition"] == 3


@pytest.mark.parametrize("fmt", ["json", "base64", "string"])
def test_value_formats_round_trip(client: httpx.Client, topic_name: str, fmt: str) -> None:
    create_topic(client, topic_name, 1)
    values = {"json": [{"a": 1, "b": [1, 2]}, "text", 3.5, None],
              "base64": [base64.b64encode(bytes(range(256))).decode(), base64.b64encode(b"plain").decode()],
              "string": ["héllo", "", "with\nnewline"]}[fmt]
    body = {"value_format": fmt, "key_format": fmt,
            "records": [{"key": v, "value": v} for v in values]}
    response = produce(client, topic_name, body)
    assert response.status_code == 200, response.text
    fetched = fetch_all(client, topic_name, 0, value_format=fmt, key_format=fmt)
    assert [r["value"] for r in fetched] == values
    assert [r["key"] for r in fetched] == values


def test_binary_value_fetched_as_string_comes_back_base64_flagged(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 1)
    raw = b"\xff\xfe\x00binary"
    produce(client, topic_name, {"value_format": "base64", "records": [{"value": base64.b64encode(raw).decode()}]})
    record = fetch_all(client, topic_name, 0)[0]
    assert record["value_encoding"] == "base64"
    assert base64.b64decode(record["value"]) == raw


def test_ndjson_round_trip(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 2)
    lines = "\n".join(f'{{"key": "k{i}", "value": {{"n": {i}}}}}' for i in range(50)) + "\n"
    response = client.post(f"/v1/topics/{topic_name}/records", content=lines,
                           headers={"content-type": "application/x-ndjson"}, params={"value_format": "json"})
    assert response.status_code == 200, response.text
    assert len(response.json()["offsets"]) == 50
    seen = sorted(r["value"]["n"] for p in (0, 1) for r in fetch_all(client, topic_name, p, value_format="json"))
    assert seen == list(range(50))


def arrow_body(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_arrow_ipc_produce_and_arrow_fetch(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 2)
    table = pa.table({"key": pa.array([f"k{i}".encode() for i in range(1000)], pa.binary()),
                      "value": pa.array([f"v{i}".encode() for i in range(1000)], pa.binary()),
                      "partition": pa.array([i % 2 for i in range(1000)], pa.int32())})
    response = client.post(f"/v1/topics/{topic_name}/records", content=arrow_body(table),
                           headers={"content-type": ARROW})
    assert response.status_code == 200, response.text
    offsets = response.json()["offsets"]
    assert [o["partition"] for o in offsets] == [i % 2 for i in range(1000)]
    fetched = client.get(f"/v1/topics/{topic_name}/partitions/1/records",
                         params={"offset": 0, "max_records": 5000, "format": "arrow"})
    assert fetched.headers["content-type"] == ARROW
    got = pa.ipc.open_stream(fetched.content).read_all()
    assert got.column("value").to_pylist() == [f"v{i}".encode() for i in range(1, 1000, 2)]
    assert got.column("offset").to_pylist() == list(range(500))


def test_acks_levels(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 1)
    for acks in ("1", "all"):
        response = produce(client, topic_name, {"records": [{"value": f"acks-{acks}"}]}, acks=acks)
        assert response.status_code == 200
        offset = response.json()["offsets"][0]["offset"]
        assert fetch_all(client, topic_name, 0, offset=offset)[0]["value"] == f"acks-{acks}"
    response = produce(client, topic_name, {"records": [{"value": "acks-0"}]}, acks="0")
    assert response.status_code == 200
    assert response.json()["offsets"][0]["offset"] == -1  # not known when answered, as in Kafka
    deadline = time.monotonic() + STUCK_S
    while [r["value"] for r in fetch_all(client, topic_name, 0)][-1:] != ["acks-0"]:
        assert time.monotonic() < deadline, "the acks=0 record never appeared"
        time.sleep(0.05)


def test_idempotent_producer_fields_write_once(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 3)
    body = {"producer_id": 77, "producer_epoch": 0, "sequence": 0,
            "records": [{"key": f"k{i}", "value": f"v{i}"} for i in range(10)]}
    first = produce(client, topic_name, body)
    before = end_offsets(client, topic_name)
    retry = produce(client, topic_name, body)
    assert first.status_code == retry.status_code == 200
    assert retry.json() == first.json()
    assert end_offsets(client, topic_name) == before
    assert sum(before) == 10
    gap = produce(client, topic_name, {**body, "sequence": 50})
    assert gap.status_code == 409 and gap.json()["error_code"] == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert end_offsets(client, topic_name) == before


def test_idempotency_key_write_once_even_after_restart(start_server, topic_name: str) -> None:
    server = start_server()
    with server.client() as c:
        create_topic(c, topic_name, 2)
        body = {"records": [{"key": f"k{i}", "value": f"v{i}"} for i in range(7)]}
        first = c.post(f"/v1/topics/{topic_name}/records", json=body, headers={"Idempotency-Key": "order-42"})
        again = c.post(f"/v1/topics/{topic_name}/records", json=body, headers={"Idempotency-Key": "order-42"})
        other = c.post(f"/v1/topics/{topic_name}/records", json=body, headers={"Idempotency-Key": "order-43"})
        assert first.status_code == again.status_code == other.status_code == 200
        assert again.json() == first.json()
        assert other.json() != first.json()
    server.stop()
    server = start_server()
    with server.client() as c:
        after = c.post(f"/v1/topics/{topic_name}/records", json=body, headers={"Idempotency-Key": "order-42"})
        assert after.status_code == 200, after.text
        assert after.json() == first.json()
        assert sum(end_offsets(c, topic_name)) == 14


def test_long_poll_returns_records_produced_while_waiting(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 1)
    result: dict[str, httpx.Response] = {}

    def wait() -> None:
        with httpx.Client(base_url=str(client.base_url), timeout=30) as other:
            result["r"] = other.get(f"/v1/topics/{topic_name}/partitions/0/records",
                                    params={"offset": 0, "timeout_ms": 10_000})

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    produce(client, topic_name, {"records": [{"value": "late"}]})
    waiter.join(15)
    assert [r["value"] for r in result["r"].json()["records"]] == ["late"]


def test_list_offsets_earliest_latest_timestamp(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 1)
    produce(client, topic_name, {"records": [{"value": str(i), "timestamp": 1000 * (i + 1)} for i in range(5)]})
    url = f"/v1/topics/{topic_name}/partitions/0/offsets"
    assert client.get(url, params={"spec": "earliest"}).json()["offset"] == 0
    assert client.get(url, params={"spec": "latest"}).json()["offset"] == 5
    assert client.get(url, params={"spec": "2500"}).json()["offset"] == 2
    assert client.get(url, params={"spec": "99999"}).json()["offset"] == 5


def test_topic_admin_cycle(client: httpx.Client, topic_name: str) -> None:
    created = create_topic(client, topic_name, 2, **{"retention.ms": "3600000"})
    assert created["config"]["retention.ms"] == 3600000
    assert topic_name in [t["name"] for t in client.get("/v1/topics").json()["topics"]]
    altered = client.patch(f"/v1/topics/{topic_name}/config", json={"config": {"retention.ms": 7200000}})
    assert altered.status_code == 200 and altered.json()["config"]["retention.ms"] == 7200000
    grown = client.post(f"/v1/topics/{topic_name}/partitions", json={"partitions": 5})
    assert grown.status_code == 200 and len(grown.json()["partitions"]) == 5
    shrink = client.post(f"/v1/topics/{topic_name}/partitions", json={"partitions": 3})
    assert shrink.status_code == 422 and shrink.json()["error_code"] == "INVALID_PARTITIONS"
    again = client.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    assert again.status_code == 409 and again.json()["error_code"] == "TOPIC_ALREADY_EXISTS"
    produce(client, topic_name, {"records": [{"value": "x", "partition": 4}]})
    described = client.get(f"/v1/topics/{topic_name}").json()
    assert described["partitions"][4]["log_end_offset"] == 1 and described["partitions"][4]["size_bytes"] > 0
    assert client.delete(f"/v1/topics/{topic_name}").status_code == 200
    assert client.get(f"/v1/topics/{topic_name}").status_code == 404
    assert topic_name not in [t["name"] for t in client.get("/v1/topics").json()["topics"]]


def test_produce_creates_a_missing_topic(client: httpx.Client, topic_name: str) -> None:
    """auto.create.topics.enable (on by default, as in Kafka): num.partitions (1) partitions. Off, a 404:
    tests/kafka/test_kafka_auto_create.py."""
    response = produce(client, topic_name, {"records": [{"value": "x"}]})
    assert response.status_code == 200, response.text
    assert response.json()["offsets"][0]["offset"] == 0
    assert [p["log_end_offset"] for p in client.get(f"/v1/topics/{topic_name}").json()["partitions"]] == [1]


def test_health_ready_metrics_docs(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 1)
    produce(client, topic_name, {"records": [{"value": "m"}]})
    fetch_all(client, topic_name, 0)
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    text = client.get("/metrics").text
    assert f'lakelog_produce_records_total{{topic="{topic_name}"}} 1.0' in text
    assert f'lakelog_fetch_records_total{{topic="{topic_name}"}} 1.0' in text
    for name in ("lakelog_produce_latency_seconds_bucket", "lakelog_delta_commits_total",
                 "lakelog_delta_commit_conflicts_total", "lakelog_errors_total"):
        assert name in text or name.removesuffix("_total") in text
    assert client.get("/docs").status_code == 200
    assert "/v1/topics/{topic}/records" in client.get("/openapi.json").json()["paths"]
