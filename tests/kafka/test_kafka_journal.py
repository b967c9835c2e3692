"""With the node journal on, a Kafka client's idempotent produce (acks=all) is acknowledged on the journal
and consumed at once, before any table commit, at the offsets the producer was answered; the table holds
them after the flush, once each."""

from __future__ import annotations

import time

import httpx
import pytest
from deltalake import DeltaTable

from lakelog.platform.storage import Storage
from tests.http import conftest as http_fixtures
from tests.kafka.kafka_clients import CLIENTS, Received
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

start_server = http_fixtures.start_server  # the fixture, here too


@pytest.mark.parametrize("client", CLIENTS[:2], ids=lambda c: c.name)
def test_consumed_before_the_table_commit(start_server, client) -> None:
    server = start_server(journal_enable=True)
    topic, group = f"journal-{client.name}", f"g-{client.name}"
    response = httpx.post(f"{server.url}/v1/topics", timeout=STUCK_S, json={
        "name": topic, "partitions": 2, "config": {"table.commit.interval.ms": 600_000}})
    assert response.status_code == 201, response.text
    now = int(time.time() * 1000)
    sent = [(f"k{i}".encode(), f"v{i}".encode(), [("h", b"x")], now + i) for i in range(20)]
    placed = client.produce(server.bootstrap, topic, sent)
    got = client.consume(server.bootstrap, topic, group, count=20)
    assert sorted(got, key=lambda r: r.key) == sorted(
        (Received(p, o, k, v, h, t) for (k, v, h, t), (p, o) in zip(sent, placed)), key=lambda r: r.key)
    storage = Storage.open(server.root)
    table = DeltaTable(storage.uri("topics", topic))
    assert table.to_pyarrow_table(columns=["offset"]).num_rows == 0  # served from the journal's memory
    server.settle()  # commits the journal's entries to the table
    stored = assert_topic_intact(server.root, topic)
    assert {(p, o) for p, offsets in stored.items() for o in offsets} == set(placed)
