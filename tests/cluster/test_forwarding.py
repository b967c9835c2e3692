"""Produce through a node that does not lead the topic: the calls reach the leader, which commits them; a
leader that refuses the node-to-node call (another cluster secret) leaves the calls to be written here.
Two real servers on one root, over sockets."""

from __future__ import annotations

from typing import Callable

from log_check import assert_topic_intact
from tests.cluster.cluster_nodes import wait_until
from tests.patience import STUCK_S
from tests.http.conftest import ThreadServer

FAST = {"broker_heartbeat_interval_ms": 200, "broker_session_timeout_ms": 2000}


def pair(start_server: Callable[..., ThreadServer], **overrides: object) -> tuple[ThreadServer, ThreadServer]:
    secrets = overrides.pop("secrets", (None, None))
    a = start_server(node_id="a", cluster_secret=secrets[0], **FAST, **overrides)  # type: ignore[index]
    b = start_server(node_id="b", cluster_secret=secrets[1], **FAST, **overrides)  # type: ignore[index]
    with a.client() as c:
        wait_until(lambda: len(c.get("/v1/cluster").json()["nodes"]) == 2, STUCK_S, "two nodes")
    return a, b


def led_by(server: ThreadServer, node_id: str, count: int = 12) -> str:
    """A topic (created here) that `node_id` leads."""
    with server.client() as c:
        for i in range(count):
            assert c.post("/v1/topics", json={"name": f"t{i}", "partitions": 3}).status_code == 201
        leaders = c.get("/v1/cluster").json()["topics"]
    return next(t for t, leader in leaders.items() if leader == node_id)


def produce(server: ThreadServer, topic: str, values: list[str]) -> list[dict]:
    with server.client() as c:
        response = c.post(f"/v1/topics/{topic}/records",
                          json={"records": [{"key": v, "value": v} for v in values]})
        assert response.status_code == 200, response.text
        return response.json()["offsets"]


def commits(server: ThreadServer, topic: str) -> int:
    return server.app.state.services.broker.topic_log(topic).commits


def test_calls_through_a_node_that_does_not_lead_are_committed_by_the_leader(start_server, tmp_path) -> None:
    a, b = pair(start_server)
    topic = led_by(a, "b")
    forwarded = [produce(a, topic, [f"a{i}-{j}" for j in range(5)]) for i in range(10)]
    direct = produce(b, topic, ["b0", "b1"])
    a.settle()
    b.settle()  # the table commits behind the journals' answers
    assert commits(a, topic) == 0 and commits(b, topic) >= 1  # every record went through the leader
    offsets = [(o["partition"], o["offset"]) for call in forwarded for o in call] + \
        [(o["partition"], o["offset"]) for o in direct]
    assert len(set(offsets)) == 52
    assert_topic_intact(str(tmp_path / "root"), topic)


def test_an_idempotent_retry_through_the_other_node_is_answered_with_the_first_offsets(start_server) -> None:
    a, b = pair(start_server)
    topic = led_by(a, "b")
    body = {"producer_id": 7, "producer_epoch": 0, "sequence": 0, "records": [{"value": "x"}, {"value": "y"}]}
    answers = []
    for server in (a, b, a):
        with server.client() as c:
            response = c.post(f"/v1/topics/{topic}/records", json=body)
            assert response.status_code == 200, response.text
            answers.append(response.json()["offsets"])
    assert answers[0] == answers[1] == answers[2]  # partitions included: unkeyed, the retry could go elsewhere
    with b.client() as c:
        ends = [p["log_end_offset"] for p in c.get(f"/v1/topics/{topic}").json()["partitions"]]
    assert sum(ends) == 2


def test_a_leader_that_refuses_the_call_leaves_it_to_be_written_here(start_server, tmp_path) -> None:
    a, b = pair(start_server, secrets=("old", "new"))  # a cluster secret rotation half done
    topic = led_by(a, "b")
    produce(a, topic, ["through-a"])
    produce(b, topic, ["through-b"])
    a.settle()
    b.settle()  # the table commits behind the journals' answers
    # a acknowledged the call the leader refused on its own journal; b's produce took the topic over (a's
    # generation fenced, its entry replayed into the table): both written, correct, only not the cheapest.
    assert commits(a, topic) + commits(b, topic) >= 1
    table = assert_topic_intact(str(tmp_path / "root"), topic)
    assert sum(len(offsets) for offsets in table.values()) == 2
