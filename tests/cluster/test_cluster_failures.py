"""The failure model's third case (the README's "When a node fails"): a node that loses the store. Two nodes
on S3 (the loopback endpoint), one of them reaching it through a proxy that stops answering: that node
drops out of the cluster, the other serves every topic and group, the cut-off node answers only
retriable errors, and when the store comes back it rejoins. Nothing acknowledged is lost. The surviving
node fences the cut-off node's journal generation as it takes each topic,
and the rejoined node's first produce of a topic meets that fence and is sent again in a new generation
(no error reaches the client).

(A node that dies and a node that pauses are the chaos test's SIGKILL and SIGSTOP.)"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from log_check import assert_topic_intact
from s3_latency import DelayProxy
from tests.cluster.cluster_nodes import SESSION_MS, Node, wait_for, wait_until
from tests.conftest import s3_env
from tests.patience import STUCK_S

pytestmark = [pytest.mark.slow, pytest.mark.s3]
TOPICS = [f"t{i}" for i in range(6)]
UNREACHABLE_S = 10.0  # one-way delay: every request to the store outlasts the session timeout many times


def live_nodes(node: Node) -> list[str] | None:
    try:
        return [n["node_id"] for n in httpx.get(node.url + "/v1/cluster", timeout=5).json()["nodes"]]
    except (httpx.HTTPError, ValueError, KeyError):
        return None


def produce(node: Node, topic: str, value: str) -> httpx.Response:
    return httpx.post(f"{node.url}/v1/topics/{topic}/records", params={"timeout_ms": 3000},
                      json={"records": [{"key": value, "value": value}]}, timeout=STUCK_S)


def produce_acknowledged(node: Node, topic: str, value: str) -> None:
    """Sent until acknowledged, as a client retries a retriable error: right after the rejoin, what the node
    started while cut off (a journal claim, a table commit) may still wait on requests it had in flight."""
    def attempt() -> bool:
        response = produce(node, topic, value)
        assert response.status_code == 200 or (response.status_code == 503 and response.json()["retriable"]), \
            response.text
        return response.status_code == 200

    wait_for(attempt, f"{value} acknowledged")


def test_a_node_that_loses_the_store_drops_out_and_rejoins_when_it_is_back(moto_endpoint: str) -> None:
    root = "s3://lakelog-cluster/failures"
    proxy = DelayProxy(int(moto_endpoint.rsplit(":", 1)[1])).start()
    env = s3_env(moto_endpoint)
    cut = Node(root, "cut", {**env, "AWS_ENDPOINT_URL": proxy.endpoint})
    steady = Node(root, "steady", env)
    acked: dict[str, set[str]] = {t: set() for t in TOPICS}
    try:
        for node in (cut, steady):
            node.start()
        for topic in TOPICS:
            assert httpx.post(steady.url + "/v1/topics", json={"name": topic, "partitions": 2}, timeout=STUCK_S).status_code == 201
        wait_until(lambda: live_nodes(steady) == ["cut", "steady"] == live_nodes(cut), STUCK_S, "both nodes")
        leaders = httpx.get(steady.url + "/v1/cluster", timeout=STUCK_S).json()["topics"]
        assert set(leaders.values()) == {"cut", "steady"}  # each leads some topics: the test moves them
        for topic in TOPICS:  # both nodes serve every topic before the cut
            for node in (cut, steady):
                assert produce(node, topic, f"{topic}-before-{node.name}").status_code == 200
                acked[topic].add(f"{topic}-before-{node.name}")

        proxy.delay = UNREACHABLE_S
        wait_until(lambda: live_nodes(steady) == ["steady"], SESSION_MS / 1000 * 4, "the cut-off node to drop out")
        for topic in TOPICS:  # the surviving node serves every topic, the cut-off node's included
            response = produce(steady, topic, f"{topic}-while-cut")
            assert response.status_code == 200, response.text
            acked[topic].add(f"{topic}-while-cut")
        answers = [produce(cut, TOPICS[0], "through-the-cut-node"),
                   httpx.post(cut.url + "/v1/groups/g/members", json={"topics": TOPICS}, timeout=STUCK_S)]
        for answer in answers:  # refused, retriably: a client goes to another node
            assert answer.status_code == 503 and answer.json()["retriable"], answer.text

        proxy.delay = 0.0
        wait_until(lambda: live_nodes(steady) == ["cut", "steady"] == live_nodes(cut), STUCK_S, "the node to rejoin")
        for topic in TOPICS:
            for node in (cut, steady):
                produce_acknowledged(node, topic, f"{topic}-after-{node.name}")
                acked[topic].add(f"{topic}-after-{node.name}")
    finally:
        proxy.delay = 0.0
        for node in (cut, steady):
            node.terminate()
        proxy.stop()
    options = {name.lower(): value for name, value in s3_env(moto_endpoint).items() if name.startswith("AWS_")}
    for topic in TOPICS:
        assert_topic_intact(root, topic, options)
    stored = stored_values(root, options)
    for topic, values in acked.items():
        assert values <= stored[topic], f"{topic}: acknowledged records lost: {sorted(values - stored[topic])}"


def stored_values(root: str, options: dict[str, Any]) -> dict[str, set[str]]:
    from deltalake import DeltaTable

    from lakelog.platform.storage import Storage

    store = Storage.open(root, options)
    return {topic: {v.decode() for v in DeltaTable(store.uri("topics", topic), storage_options=store.delta_options())
                    .to_pyarrow_table(columns=["value"]).column("value").to_pylist()} for topic in TOPICS}
