"""Issue 26's "consumers see a record as soon as it is acknowledged": with the node journal on and the table
commit ten minutes away, records produced at the leader live in its memory only; the node that does not
lead the topic relays fetches past its table's end and its log end offsets to the leader. Two `lakelog
serve` nodes on one root, over sockets: through the non-leader, a fetch (at once, and a long poll woken by
a later produce) answers the leader's records as the leader serves them, its describe, `latest` and a
group's lag count them, and an HTTP consumer group coordinated there consumes them, all before the table
holds a record."""

from __future__ import annotations

import itertools
import signal
import threading
import time
from typing import Callable

import httpx
import pytest
from deltalake import DeltaTable

from lakelog.client import Consumer
from lakelog.platform.cluster.forwarding import SECRET_HEADER
from lakelog.platform.cluster.ownership import group_key, owner, topic_key
from lakelog.platform.cluster.wire import FetchAsk, decode_fetched
from lakelog.platform.storage import Storage
from log_check import assert_topic_intact
from tests.cluster.cluster_nodes import Node, settled, views, wait_for, wait_until
from tests.http.conftest import ThreadServer, fetch_all
from tests.patience import STUCK_S

pytestmark = pytest.mark.slow
NAMES = ("n1", "n2")
PARTITIONS, PER_PARTITION = 2, 30


def first_owned_by(node: str, prefix: str, key) -> str:  # type: ignore[no-untyped-def]
    return next(name for i in itertools.count() if owner(key(name := f"{prefix}{i}"), NAMES) == node)


def produce(url: str, topic: str, records: list[dict]) -> list[tuple[int, int]]:
    response = httpx.post(f"{url}/v1/topics/{topic}/records", timeout=STUCK_S, json={"records": records})
    assert response.status_code == 200, response.text
    return [(o["partition"], o["offset"]) for o in response.json()["offsets"]]


def table_rows(root: str, topic: str) -> int:
    storage = Storage.open(root)
    return DeltaTable(storage.uri("topics", topic)).to_pyarrow_table(columns=["offset"]).num_rows


def consume(consumer: Consumer, wanted: dict[str, tuple[int, int]],
            consumed: dict[str, tuple[int, int]] | None = None) -> dict[str, tuple[int, int]]:
    consumed = dict(consumed or {})
    deadline = time.monotonic() + STUCK_S
    while len(consumed) < len(wanted):
        assert time.monotonic() < deadline, f"consumed {len(consumed)} of {len(wanted)}"
        consumed.update({m.value().decode(): (m.partition(), m.offset()) for m in consumer.consume(100, 1.0)})
    return consumed


def lags(url: str, group: str) -> set[tuple[int, int, int]]:
    """(partition, committed offset, lag) as the group's coordinator reports them."""
    answer = httpx.get(f"{url}/v1/groups/{group}/offsets", timeout=STUCK_S)
    assert answer.status_code == 200, answer.text
    return {(e["partition"], e["offset"], e["lag"]) for e in answer.json()["offsets"]}


def test_a_non_leader_serves_acknowledged_records_before_the_table_commit(tmp_path) -> None:
    root = str(tmp_path / "root")
    nodes = [Node(root, name, {}) for name in NAMES]
    topic = first_owned_by("n2", "jr", topic_key)
    group = first_owned_by("n1", "g", group_key)  # coordinated by the node that does not lead the topic
    try:
        for node in nodes:
            node.start()
        wait_until(lambda: settled(nodes) is not None, STUCK_S, lambda: views(nodes))
        httpx.post(nodes[0].url + "/v1/topics", timeout=STUCK_S, json={
            "name": topic, "partitions": PARTITIONS, "config": {"table.commit.interval.ms": 600_000}
        }).raise_for_status()
        cluster = wait_for(lambda: (c := settled(nodes)) and topic in c["topics"] and c,
                           lambda: f"both nodes to know {topic}: {views(nodes)}")
        assert cluster["topics"][topic] == "n2"
        other, leader = nodes
        records = [{"key": f"k{p}-{i}", "value": f"v{p}-{i}", "partition": p, "timestamp": 1_700_000_000_000 + i,
                    "headers": [{"key": "h", "value": f"{i}"}]} for p in range(PARTITIONS) for i in range(PER_PARTITION)]
        acked = dict(zip((r["value"] for r in records), produce(leader.url, topic, records)))
        assert sorted(acked.values()) == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
        assert table_rows(root, topic) == 0  # in the leader's journal only

        with httpx.Client(base_url=other.url, timeout=STUCK_S) as o, \
                httpx.Client(base_url=leader.url, timeout=STUCK_S) as ld:
            for p in range(PARTITIONS):  # (1) as the leader serves them: offsets, timestamps, keys, values, headers
                relayed = fetch_all(o, topic, p)
                assert [r["offset"] for r in relayed] == list(range(PER_PARTITION))
                assert relayed == fetch_all(ld, topic, p)
                assert relayed[1]["headers"] == [{"key": "h", "value": "1"}], relayed[1]
            ends = [p["log_end_offset"] for p in o.get(f"/v1/topics/{topic}").json()["partitions"]]
            assert ends == [PER_PARTITION] * PARTITIONS  # (2) the leader's ends
            # Asked for the leader's ends, the node that does not lead refuses: taking the topic's epoch to
            # answer would fence the leader's writes.
            refused = o.post(f"/internal/v1/topics/{topic}/log-ends")
            assert refused.status_code == 503 and refused.json()["error_code"] == "NOT_LEADER_OR_FOLLOWER", \
                refused.text
            assert ld.post(f"/internal/v1/topics/{topic}/log-ends").json() == [PER_PARTITION] * PARTITIONS
            for p in range(PARTITIONS):
                latest = o.get(f"/v1/topics/{topic}/partitions/{p}/offsets", params={"spec": "latest"})
                assert latest.json()["offset"] == PER_PARTITION, latest.text

            woken: list = []  # a long poll at the end, through the non-leader, woken by a produce at the leader
            poll = threading.Thread(target=lambda: woken.append(o.get(
                f"/v1/topics/{topic}/partitions/0/records", params={"offset": PER_PARTITION, "timeout_ms": 20_000})))
            poll.start()
            time.sleep(0.5)
            acked.update(zip(["late"], produce(leader.url, topic, [{"value": "late", "partition": 0}])))
            poll.join(STUCK_S)
            assert woken and [(r["offset"], r["value"]) for r in woken[0].json()["records"]] == \
                [(PER_PARTITION, "late")], woken

        consumer = Consumer(other.url, {"group.id": group, "auto.offset.reset": "earliest",
                                        "enable.auto.commit": False})
        try:
            consumer.subscribe([topic])
            consumed = consume(consumer, acked)  # (3) the group's poll at its coordinator, the non-leader
            assert consumed == acked
            consumer.commit(asynchronous=False)
            assert lags(other.url, group) == {(0, PER_PARTITION + 1, 0), (1, PER_PARTITION, 0)}
            more = [{"value": f"more-{i}", "partition": 1} for i in range(5)]
            acked.update(zip((r["value"] for r in more), produce(leader.url, topic, more)))
            assert lags(other.url, group) == {(0, PER_PARTITION + 1, 0), (1, PER_PARTITION, 5)}  # the leader's end
            assert consume(consumer, acked, consumed) == acked
        finally:
            consumer.close()
        assert table_rows(root, topic) == 0  # all of it before any table commit
        after_the_leader_stops(other, leader, topic, acked)
    finally:
        for node in nodes:
            node.signal(signal.SIGCONT)
            node.terminate()  # a clean stop commits the journal's entries to the tables
    stored = assert_topic_intact(root, topic)
    assert set(acked.values()) == {(p, o) for p, offsets in stored.items() for o in offsets}


def after_the_leader_stops(other: Node, leader: Node, topic: str, acked: dict[str, tuple[int, int]]) -> None:
    """The leader stops answering, its acknowledged records in its journal only. A read past the other
    node's table is no OFFSET_OUT_OF_RANGE (a consumer would reset past them, or back): first a retriable
    refusal while the leader is only silent, then, once the other node leads the topic, its records, read
    from the journal the takeover replayed into the table."""
    leader.signal(signal.SIGSTOP)
    past_table = {"offset": 5, "timeout_ms": 0}
    with httpx.Client(base_url=other.url, timeout=STUCK_S) as o:
        silent = o.get(f"/v1/topics/{topic}/partitions/0/records", params=past_table)
        assert silent.status_code == 503 and silent.json()["error_code"] == "NOT_LEADER_OR_FOLLOWER", silent.text
        wait_for(lambda: (c := settled([other])) and c["topics"].get(topic) == other.name,
                 lambda: f"{other.name} to lead {topic}: {views([other])}")
        taken = wait_for(lambda: (r := o.get(f"/v1/topics/{topic}/partitions/0/records", params=past_table))
                         .status_code != 503 and r, "an answer other than a retriable refusal")
        assert taken.status_code == 200, taken.text
        on_partition_0 = sorted((offset, value) for value, (p, offset) in acked.items() if p == 0 and offset >= 5)
        assert [(r["offset"], r["value"]) for r in taken.json()["records"]] == on_partition_0


def test_the_relay_routes_need_the_cluster_secret_and_a_well_formed_ask(
        start_server: Callable[..., ThreadServer]) -> None:
    leader = start_server(journal_node="leader", cluster_secret="s3cret")
    secret = {SECRET_HEADER: "s3cret"}
    ask = FetchAsk(0, 0, 10, None, 0).encode()
    with leader.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
        assert c.post("/v1/topics/t/records", json={"records": [{"value": "a"}, {"value": "b"}]}).status_code == 200
        for path, body in (("/internal/v1/topics/t/fetch", ask), ("/internal/v1/topics/t/log-ends", b"")):
            refused = c.post(path, content=body)
            assert refused.status_code == 403 and refused.json()["error_code"] == "CLUSTER_AUTHORIZATION_FAILED"
        bad = c.post("/internal/v1/topics/t/fetch", content=b'{"partition": 0}', headers=secret)
        assert bad.status_code == 400 and "relayed fetch" in bad.json()["message"], bad.text
        answer = c.post("/internal/v1/topics/t/fetch", content=ask, headers=secret)
        assert answer.status_code == 200, answer.text
        fetched = decode_fetched("t", 0, answer.content)
        assert [(r.offset, r.value) for r in fetched] == [(0, b"a"), (1, b"b")]
        assert fetched.high_watermark == 2
        ends = c.post("/internal/v1/topics/t/log-ends", headers=secret)
        assert ends.status_code == 200 and ends.json() == [2], ends.text
        unknown = c.post("/internal/v1/topics/nope/fetch", content=ask, headers=secret)
        assert unknown.status_code == 404 and unknown.json()["error_code"] == "UNKNOWN_TOPIC_OR_PARTITION"
