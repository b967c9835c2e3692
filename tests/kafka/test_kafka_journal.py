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
    server = start_server()
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


def test_a_transaction_between_journaled_produce(start_server) -> None:
    """A transactional batch reserves its offsets in the table: the journal's acknowledged records are
    committed first and its flushes wait meanwhile, so the reservation follows them and later produce
    follows it. read_committed consumers stop at the open transaction (records served from the journal's
    memory behind it included) and read on, in offset order, once it commits."""
    from confluent_kafka import Producer

    from tests.kafka.test_kafka_transactions import read_committed, transactional

    server = start_server()
    topic = "journal-txn"
    response = httpx.post(f"{server.url}/v1/topics", timeout=STUCK_S, json={
        "name": topic, "partitions": 1, "config": {"table.commit.interval.ms": 600_000}})
    assert response.status_code == 201, response.text
    plain = Producer({"bootstrap.servers": server.bootstrap})

    def produce_plain(*values: bytes) -> None:
        for value in values:
            plain.produce(topic, value=value, partition=0)
        assert plain.flush(STUCK_S) == 0

    produce_plain(b"p0", b"p1", b"p2")  # on the journal only
    producer = transactional(server.bootstrap, "journal-txn-1")
    producer.begin_transaction()
    for value in (b"t0", b"t1"):
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(STUCK_S) == 0  # reserved: offsets 3 and 4
    produce_plain(b"p3", b"p4")  # on the journal, after the reservation
    assert [(o, v) for _, o, v in read_committed(server.bootstrap, [topic], "before", 3)] == [
        (0, b"p0"), (1, b"p1"), (2, b"p2")]  # not p3 and p4: they come after the open transaction

    def fetch_at_5() -> dict:  # past the reservation: p3 and p4, in the journal's memory
        answer = httpx.get(f"{server.url}/v1/topics/{topic}/partitions/0/records", params={"offset": 5},
                           timeout=STUCK_S)
        assert answer.status_code == 200, answer.text
        return answer.json()

    before = fetch_at_5()
    assert (before["records"], before["last_stable_offset"], before["high_watermark"]) == ([], 3, 7)
    producer.commit_transaction(STUCK_S)
    assert [r["value"] for r in fetch_at_5()["records"]] == ["p3", "p4"]
    assert [(o, v) for _, o, v in read_committed(server.bootstrap, [topic], "after", 7)] == [
        (0, b"p0"), (1, b"p1"), (2, b"p2"), (3, b"t0"), (4, b"t1"), (5, b"p3"), (6, b"p4")]
    server.settle()
    assert assert_topic_intact(server.root, topic) == {0: list(range(7))}
