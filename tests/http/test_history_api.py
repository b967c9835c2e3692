"""The history the console plots, against real servers: a topic's log end offsets rising and its produce rate,
a group's lag per partition, only what is new with `since_ms`, the describe right each needs, and a topic's
history answered by its leader when another node is asked."""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import httpx
import pytest

from lakelog.ingest_api.models import GroupHistory, TopicHistory
from lakelog.platform.cluster.ownership import owner, topic_key
from tests.http.conftest import ThreadServer, create_topic

INTERVAL_S = 0.2


def wait_for(check: Callable[[], Any], what: str, timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(INTERVAL_S / 2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def produce(client: httpx.Client, topic: str, partition: int, count: int) -> None:
    answer = client.post(f"/v1/topics/{topic}/records",
                         json={"records": [{"value": f"v{i}", "partition": partition} for i in range(count)]})
    assert answer.status_code == 200, answer.text


def topic_history(client: httpx.Client, topic: str, **params: Any) -> TopicHistory:
    answer = client.get(f"/v1/topics/{topic}/history", params=params)
    assert answer.status_code == 200, answer.text
    return TopicHistory.model_validate(answer.json())  # the documented shape, no field more


def group_history(client: httpx.Client, group: str, **params: Any) -> GroupHistory:
    answer = client.get(f"/v1/groups/{group}/history", params=params)
    assert answer.status_code == 200, answer.text
    return GroupHistory.model_validate(answer.json())


def latest_end(history: TopicHistory, partition: int) -> int | None:
    ends = [p.log_end_offset for p in history.partitions if p.partition == partition]
    return ends[0][-1] if ends and ends[0] else None


def test_history_shows_the_log_end_offset_rising_and_the_lag(
        start_server: Callable[..., ThreadServer], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKELOG_HISTORY_INTERVAL_S", str(INTERVAL_S))  # as `lakelog serve` reads it
    server = start_server()
    with server.client() as c:
        create_topic(c, "clicks", 2)
        produce(c, "clicks", 0, 5)
        first = wait_for(lambda: (h := topic_history(c, "clicks")) and latest_end(h, 0) == 5 and h, "a sample of 5")
        assert first.interval_ms == 200 and first.window_ms == 3_600_000
        produce(c, "clicks", 0, 7)
        produce(c, "clicks", 1, 3)
        history = wait_for(lambda: (h := topic_history(c, "clicks")) and latest_end(h, 0) == 12
                           and latest_end(h, 1) == 3 and h, "a later sample of 12 and 3")
        p0, p1 = history.partitions
        ends = [e for e in p0.log_end_offset if e is not None]
        assert ends == sorted(ends) and 5 in ends and ends[-1] == 12  # it rose, sample by sample
        assert history.times_ms == sorted(set(history.times_ms)) and len(history.times_ms) >= 2
        assert p1.log_end_offset[-1] == 3 and p0.size_bytes[-1] > first.partitions[0].size_bytes[-1] > 0
        # records/s: the log end offset's change over the time between samples, adding up to its growth
        grown = sum(r * (t1 - t0) / 1000 for r, t0, t1 in
                    zip(p0.records_per_s[1:], history.times_ms, history.times_ms[1:]) if r is not None)
        assert grown == pytest.approx(12 - ends[0], abs=0.05) and max(r or 0 for r in p0.records_per_s) > 0

        newer = topic_history(c, "clicks", since_ms=history.times_ms[-1])
        assert all(t > history.times_ms[-1] for t in newer.times_ms)

        joined = c.post("/v1/groups/readers/members", json={"topics": ["clicks"], "session.timeout.ms": 60000,
                                                             "auto.offset.reset": "earliest"})
        assert joined.status_code == 201, joined.text
        member = joined.json()["member_id"]
        beat = wait_for(lambda: (b := c.post(f"/v1/groups/readers/members/{member}/heartbeat").json())
                        and b["state"] == "Stable" and b, "a stable group")
        commit = c.post("/v1/groups/readers/offsets", json={
            "member_id": member, "generation": beat["generation"],
            "offsets": [{"topic": "clicks", "partition": 0, "offset": 2}, {"topic": "clicks", "partition": 1,
                                                                            "offset": 3}]})
        assert commit.status_code == 200, commit.text
        # before the commit a sample may show the lag from the log start (12 and 3): wait for one after it
        wait_for(lambda: [(s.topic, s.partition, s.lag[-1]) for s in group_history(c, "readers").partitions]
                 == [("clicks", 0, 10), ("clicks", 1, 0)], "the group's lag from its committed offsets")
        produce(c, "clicks", 1, 4)
        wait_for(lambda: [s.lag[-1] for s in group_history(c, "readers").partitions] == [10, 4], "lag on clicks-1")

        assert c.get("/v1/topics/nope/history").status_code == 404
        assert c.get("/v1/groups/nope/history").status_code == 404
        assert c.get("/v1/topics/clicks/history", params={"since_ms": -1}).status_code == 422


KEYS = {"key-admin": "admin", "key-alice": "alice", "key-carol": "carol", "key-dave": "dave"}


def test_history_needs_describe_on_the_topic_or_the_group(
        start_server: Callable[..., ThreadServer]) -> None:
    server = start_server(api_keys_json=json.dumps(KEYS), history_interval_s=INTERVAL_S)
    with server.client(headers={"Authorization": "Bearer key-admin"}) as admin:
        create_topic(admin, "ledger", 1)
        grants = [  # alice may describe both; carol may only create the topic; dave may read the group only
            {"principal": "alice", "resource_type": "topic", "resource_name": "ledger", "operation": "describe"},
            {"principal": "alice", "resource_type": "group", "resource_name": "auditors", "operation": "describe"},
            {"principal": "carol", "resource_type": "topic", "resource_name": "ledger", "operation": "create"},
            {"principal": "dave", "resource_type": "group", "resource_name": "auditors", "operation": "read"}]
        assert admin.post("/v1/acls", json={"acls": grants}).status_code == 201
        produce(admin, "ledger", 0, 2)
        commit = admin.post("/v1/groups/auditors/offsets", json={"offsets": [{"topic": "ledger", "partition": 0,
                                                                              "offset": 1}]})
        assert commit.status_code == 200, commit.text
        wait_for(lambda: group_history(admin, "auditors").partitions, "a lag sample")

    def get(key: str, path: str) -> httpx.Response:
        with server.client(headers={"Authorization": f"Bearer {key}"}) as client:
            return client.get(path)

    refused = get("key-carol", "/v1/topics/ledger/history")
    assert refused.status_code == 403 and refused.json()["error_code"] == "TOPIC_AUTHORIZATION_FAILED"
    refused = get("key-carol", "/v1/groups/auditors/history")
    assert refused.status_code == 403 and refused.json()["error_code"] == "GROUP_AUTHORIZATION_FAILED"
    assert get("key-wrong", "/v1/topics/ledger/history").status_code == 401
    allowed = get("key-alice", "/v1/topics/ledger/history")
    assert allowed.status_code == 200 and allowed.json()["partitions"][0]["log_end_offset"][-1] == 2
    lag = get("key-alice", "/v1/groups/auditors/history").json()["partitions"]
    assert [(p["topic"], p["lag"][-1]) for p in lag] == [("ledger", 1)]
    hidden = get("key-dave", "/v1/groups/auditors/history")  # the group, but not the topic: as in describe
    assert hidden.status_code == 200 and hidden.json()["partitions"] == [] and hidden.json()["times_ms"]


def test_a_topics_history_is_answered_by_its_leader(
        start_server: Callable[..., ThreadServer], tmp_path: Any) -> None:
    cluster = {"history_interval_s": INTERVAL_S, "broker_heartbeat_interval_ms": 100,
               "broker_session_timeout_ms": 2000}
    asked, other = start_server(**cluster), start_server(**cluster)
    with asked.client() as c:
        nodes = wait_for(lambda: (n := c.get("/v1/cluster").json()) and len(n["nodes"]) == 2 and n, "two nodes")
        here = nodes["node"]
        ids = [n["node_id"] for n in nodes["nodes"]]
        name = next(f"led-{i}" for i in range(100) if owner(topic_key(f"led-{i}"), ids) != here)
        create_topic(c, name, 1)
        produce(c, name, 0, 3)  # forwarded to the leader, which samples it; this node does not
        history = wait_for(lambda: (h := topic_history(c, name)) and latest_end(h, 0) == 3 and h,
                           "the leader's samples, through this node")
        assert history.times_ms
    assert not asked.app.state.services.history.topics.since(name, 0)  # nothing sampled where it was asked
    assert other.app.state.services.history.topics.since(name, 0)
