"""Two `lakelog serve` nodes on one root with the node journal on, each journaling under its node id (the
default `journal_node`): calls through the node that does not lead a topic reach the leader, which
acknowledges them on its journal; SIGKILL the leader before any table commit, and the other node takes the
topic over on its next produce (fences the dead leader's generation, replays what it acknowledged into the
table): every acknowledged record is there once, at its offset."""

from __future__ import annotations

import os
import time

import httpx
import pytest

from deltalake import DeltaTable

from lakelog.platform.storage import Storage
from log_check import assert_topic_intact
from tests.cluster.cluster_nodes import Node, settled, views, wait_for, wait_until
from tests.http.conftest import fetch_all
from tests.patience import STUCK_S

pytestmark = pytest.mark.slow
TOPICS = {f"jt{i}": 2 for i in range(6)}


def produce(url: str, topic: str, values: list[str]) -> list[tuple[int, int]] | None:
    try:
        response = httpx.post(f"{url}/v1/topics/{topic}/records", timeout=STUCK_S,
                              json={"records": [{"key": v, "value": v} for v in values]})
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        assert response.json()["retriable"], response.text
        return None
    return [(o["partition"], o["offset"]) for o in response.json()["offsets"]]


def test_a_killed_leaders_acknowledged_records_are_taken_over(tmp_path) -> None:
    root = str(tmp_path / "root")
    nodes = [Node(root, name, {}) for name in ("n1", "n2")]  # journal_node unset
    acked: dict[str, tuple[int, int]] = {}
    try:
        for node in nodes:
            node.start()
        wait_until(lambda: settled(nodes) is not None, STUCK_S, lambda: views(nodes))
        assert sorted(os.listdir(os.path.join(root, "_journal", "gens"))) == ["n1", "n2"]  # by default, the node ids
        for topic, partitions in TOPICS.items():
            httpx.post(nodes[0].url + "/v1/topics", timeout=STUCK_S, json={
                "name": topic, "partitions": partitions, "config": {"table.commit.interval.ms": 600_000}
            }).raise_for_status()
        cluster = wait_for(lambda: (c := settled(nodes)) and len(c["topics"]) == len(TOPICS) and c,
                           lambda: f"both nodes to lead the topics: {views(nodes)}")
        topic = next(t for t, leader in cluster["topics"].items() if leader == "n2")
        survivor, victim = nodes
        for i in range(10):  # through the node that does not lead (forwarded), and at the leader
            for node in (survivor, victim):
                values = [f"{node.name}-{i}-{j}" for j in range(5)]
                placed = produce(node.url, topic, values)
                assert placed is not None
                acked.update(zip(values, placed))
        storage = Storage.open(root)
        table = DeltaTable(storage.uri("topics", topic))
        assert table.to_pyarrow_table(columns=["offset"]).num_rows == 0  # in the leader's journal only
        victim.kill()
        deadline = time.monotonic() + STUCK_S
        after: list[tuple[int, int]] | None = None
        while after is None:  # retriable answers while the survivor finds the leader gone
            assert time.monotonic() < deadline, f"the survivor never took {topic} over: {survivor.log_tail()}"
            after = produce(survivor.url, topic, ["after"])
            time.sleep(0.1)
        acked["after"] = after[0]
        assert f"n1 took {topic} from generation n2/" in survivor.log_tail(100_000)  # fenced and replayed
        with httpx.Client(base_url=survivor.url, timeout=STUCK_S) as c:
            found = {r["value"]: (p, r["offset"]) for p in range(2) for r in fetch_all(c, topic, p)}
            assert len(found) == sum(len(fetch_all(c, topic, p)) for p in range(2)), "a record twice"
        missing = {v: where for v, where in acked.items() if found.get(v) != where}
        assert not missing, f"acknowledged records lost or moved: {list(missing.items())[:5]}"
    finally:
        for node in nodes:
            node.terminate()
    stored = assert_topic_intact(root, topic)
    assert set(acked.values()) <= {(p, o) for p, offsets in stored.items() for o in offsets}
