"""Consumer groups over HTTP: failover, at-least-once, generations, static members, cooperative, restarts."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from tests.http.conftest import create_topic, end_offsets
from tests.patience import STUCK_S


class Member:
    """A consumer as a client would write it: heartbeat, poll, process, commit; rejoin when told to."""

    def __init__(self, client: httpx.Client, group: str, **join: Any) -> None:
        self.client, self.group, self.join_body = client, group, join
        self.generation = -1
        self.member_id = ""
        self.join()

    def join(self) -> None:
        response = self.client.post(f"/v1/groups/{self.group}/members", json=self.join_body)
        assert response.status_code == 201, response.text
        self.member_id = response.json()["member_id"]
        self.generation = response.json()["generation"]

    def heartbeat(self) -> dict[str, Any]:
        response = self.client.post(f"/v1/groups/{self.group}/members/{self.member_id}/heartbeat")
        assert response.status_code == 200, response.text
        body = response.json()
        self.generation = body["generation"]
        return body

    def assignment(self) -> set[tuple[str, int]]:
        return {(a["topic"], a["partition"]) for a in self.heartbeat()["assignment"]}

    def poll(self, **params: Any) -> list[dict[str, Any]]:
        response = self.client.get(f"/v1/groups/{self.group}/members/{self.member_id}/records", params=params)
        assert response.status_code == 200, response.text
        return response.json()["records"]

    def commit(self, records: list[dict[str, Any]]) -> httpx.Response:
        latest: dict[tuple[str, int], int] = {}
        for r in records:
            latest[(r["topic"], r["partition"])] = r["offset"] + 1
        offsets = [{"topic": t, "partition": p, "offset": o} for (t, p), o in latest.items()]
        return self.client.post(f"/v1/groups/{self.group}/offsets",
                                json={"member_id": self.member_id, "generation": self.generation, "offsets": offsets})

    def leave(self) -> None:
        self.client.delete(f"/v1/groups/{self.group}/members/{self.member_id}")


def produce_numbered(client: httpx.Client, topic: str, start: int, count: int) -> None:
    records = [{"key": f"k{i}", "value": str(i)} for i in range(start, start + count)]
    response = client.post(f"/v1/topics/{topic}/records", json={"records": records})
    assert response.status_code == 200, response.text


def committed(client: httpx.Client, group: str) -> dict[tuple[str, int], int]:
    response = client.get(f"/v1/groups/{group}/offsets")
    assert response.status_code == 200, response.text
    return {(o["topic"], o["partition"]): o["offset"] for o in response.json()["offsets"]}


def wait_until(predicate: Any, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, message
        time.sleep(0.05)


@pytest.mark.slow
def test_three_members_six_partitions_failover_at_least_once(shared_server, topic_name: str) -> None:
    group = f"g-{topic_name}"
    with shared_server.client() as admin:
        create_topic(admin, topic_name, 6)
        produce_numbered(admin, topic_name, 0, 3000)
    join = {"topics": [topic_name], "session.timeout.ms": 1500, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    processed: list[int] = []
    lock = threading.Lock()
    stop = {"a": threading.Event(), "b": threading.Event(), "c": threading.Event()}
    members: dict[str, Member] = {}

    def consume(name: str) -> None:
        with shared_server.client() as c:
            member = members[name] = Member(c, group, **join)
            while not stop[name].is_set():
                member.heartbeat()
                records = member.poll(max_records=100, timeout_ms=100)
                with lock:
                    processed.extend(int(r["value"]) for r in records)
                if records and member.commit(records).status_code == 409:
                    member.heartbeat()  # a rebalance happened: uncommitted records will be read again

    threads = {n: threading.Thread(target=consume, args=(n,)) for n in stop}
    for t in threads.values():
        t.start()
    wait_until(lambda: len(members) == 3, STUCK_S, "members did not join")
    with shared_server.client() as admin:
        wait_until(lambda: sum(len(m["assignment"]) for m in admin.get(f"/v1/groups/{group}").json()["members"])
                   == 6 and len(admin.get(f"/v1/groups/{group}").json()["members"]) == 3, STUCK_S, "no assignment")
        time.sleep(0.3)
        stop["c"].set()  # c stops heartbeating (and everything else) without leaving
        threads["c"].join()
        gone = time.monotonic()
        produce_numbered(admin, topic_name, 3000, 3000)

        def survivors_own_everything() -> bool:
            view = admin.get(f"/v1/groups/{group}").json()
            return len(view["members"]) == 2 and sum(len(m["assignment"]) for m in view["members"]) == 6

        wait_until(survivors_own_everything, 1.5 + 2.0, "c's partitions did not move within the session timeout")
        moved_after = time.monotonic() - gone
        ends = end_offsets(admin, topic_name)
        wait_until(lambda: committed(admin, group) == {(topic_name, p): e for p, e in enumerate(ends)}, STUCK_S,
                   "the survivors did not commit up to the log end")
    stop["a"].set()
    stop["b"].set()
    for t in threads.values():
        t.join()
    assert moved_after < 3.5
    assert set(processed) == set(range(6000)), "a record was skipped"


def test_stale_generation_commit_is_refused(client: httpx.Client, topic_name: str) -> None:
    group = f"g-{topic_name}"
    create_topic(client, topic_name, 2)
    produce_numbered(client, topic_name, 0, 10)
    first = Member(client, group, topics=[topic_name], **{"auto.offset.reset": "earliest"})
    first.heartbeat()
    old_generation = first.generation
    second = Member(client, group, topics=[topic_name])
    second.heartbeat()
    assert second.generation > old_generation
    stale = client.post(f"/v1/groups/{group}/offsets", json={
        "member_id": first.member_id, "generation": old_generation,
        "offsets": [{"topic": topic_name, "partition": 0, "offset": 5}]})
    assert stale.status_code == 409 and stale.json()["error_code"] == "ILLEGAL_GENERATION"
    assert (topic_name, 0) not in committed(client, group)
    first.heartbeat()
    fresh = client.post(f"/v1/groups/{group}/offsets", json={
        "member_id": first.member_id, "generation": first.generation,
        "offsets": [{"topic": topic_name, "partition": 0, "offset": 5}]})
    assert fresh.status_code == 200, fresh.text
    assert committed(client, group)[(topic_name, 0)] == 5
    unknown = client.post(f"/v1/groups/{group}/members/nobody/heartbeat")
    assert unknown.status_code == 404 and unknown.json()["error_code"] == "UNKNOWN_MEMBER_ID"


def test_an_empty_group_is_deleted_with_its_offsets_and_a_live_one_is_not(client: httpx.Client,
                                                                         topic_name: str) -> None:
    group = f"g-{topic_name}"
    create_topic(client, topic_name, 1)
    member = Member(client, group, topics=[topic_name])
    member.heartbeat()
    assert client.post(f"/v1/groups/{group}/offsets", json={
        "member_id": member.member_id, "generation": member.generation,
        "offsets": [{"topic": topic_name, "partition": 0, "offset": 0}]}).status_code == 200
    busy = client.delete(f"/v1/groups/{group}")
    assert busy.status_code == 409 and busy.json()["error_code"] == "NON_EMPTY_GROUP"
    assert committed(client, group) == {(topic_name, 0): 0}
    assert client.delete(f"/v1/groups/{group}/members/{member.member_id}").status_code == 204
    assert client.delete(f"/v1/groups/{group}").status_code == 204
    gone = client.get(f"/v1/groups/{group}/offsets")
    assert gone.status_code == 404 and gone.json()["error_code"] == "GROUP_ID_NOT_FOUND"
    assert group not in [g["group"] for g in client.get("/v1/groups").json()["groups"]]


def test_static_member_restart_keeps_partitions_without_rebalance(client: httpx.Client, topic_name: str) -> None:
    group = f"g-{topic_name}"
    create_topic(client, topic_name, 4)
    a = Member(client, group, topics=[topic_name], **{"group.instance.id": "a", "session.timeout.ms": 5000})
    b = Member(client, group, topics=[topic_name], **{"group.instance.id": "b", "session.timeout.ms": 5000})
    owned_a, owned_b = a.assignment(), b.assignment()
    generation = b.generation
    assert len(owned_a) == len(owned_b) == 2
    restarted = Member(client, group, topics=[topic_name], **{"group.instance.id": "a", "session.timeout.ms": 5000})
    assert restarted.member_id != a.member_id
    assert restarted.assignment() == owned_a
    assert b.assignment() == owned_b and b.generation == generation == restarted.generation
    fenced = client.post(f"/v1/groups/{group}/members/{a.member_id}/heartbeat")
    assert fenced.status_code == 409 and fenced.json()["error_code"] == "FENCED_INSTANCE_ID"


def test_cooperative_sticky_revokes_before_moving(client: httpx.Client, topic_name: str) -> None:
    group = f"g-{topic_name}"
    create_topic(client, topic_name, 4)
    join = {"topics": [topic_name], "assignor": "cooperative-sticky"}
    a = Member(client, group, **join)
    assert len(a.assignment()) == 4
    b = Member(client, group, **join)
    beat = a.heartbeat()
    revoked = {(r["topic"], r["partition"]) for r in beat["revoke"]}
    kept = {(r["topic"], r["partition"]) for r in beat["assignment"]}
    assert len(revoked) == 2 and len(kept) == 2 and not revoked & kept
    assert b.assignment() == set(), "moved before the old owner revoked"
    assert {(r["topic"], r["partition"]) for r in a.heartbeat()["assignment"]} == kept  # this heartbeat acks
    assert b.assignment() == revoked
    assert a.assignment() == kept, "partitions that stay were moved"


def test_initial_rebalance_delay_lets_the_group_fill(start_server, topic_name: str) -> None:
    server = start_server(group_initial_rebalance_delay_ms=700)
    group = f"g-{topic_name}"
    with server.client() as c:
        create_topic(c, topic_name, 4)
        a = Member(c, group, topics=[topic_name])
        assert a.heartbeat()["assignment"] == [] and a.heartbeat()["state"] == "PreparingRebalance"
        b = Member(c, group, topics=[topic_name])
        wait_until(lambda: len(a.assignment()) == 2, STUCK_S, "no assignment after the delay")
        assert len(b.assignment()) == 2 and a.generation == b.generation == 1  # one assignment, no rebalance


def test_fair_poll_reads_every_partition(client: httpx.Client, topic_name: str) -> None:
    group = f"g-{topic_name}"
    create_topic(client, topic_name, 4)
    for p in range(4):
        records = [{"value": f"{p}-{i}", "partition": p} for i in range(200)]
        client.post(f"/v1/topics/{topic_name}/records", json={"records": records})
    m = Member(client, group, topics=[topic_name], **{"auto.offset.reset": "earliest"})
    m.heartbeat()
    records = m.poll(max_records=100)
    assert len(records) == 100
    assert {r["partition"] for r in records} == {0, 1, 2, 3}


def test_leave_moves_partitions_and_reset_needs_an_empty_group(client: httpx.Client, topic_name: str) -> None:
    group = f"g-{topic_name}"
    create_topic(client, topic_name, 2)
    produce_numbered(client, topic_name, 0, 20)
    a = Member(client, group, topics=[topic_name], **{"auto.offset.reset": "earliest", "enable.auto.commit": False})
    b = Member(client, group, topics=[topic_name])
    assert len(a.assignment()) == 1
    refused = client.post(f"/v1/groups/{group}/offsets/reset", json={"to": "latest", "topics": [topic_name]})
    assert refused.status_code == 409 and refused.json()["error_code"] == "NON_EMPTY_GROUP"
    b.leave()
    assert len(a.assignment()) == 2
    records = a.poll(max_records=100)
    assert len(records) == 20
    assert a.commit(records).status_code == 200
    a.leave()
    assert client.get(f"/v1/groups/{group}").json()["state"] == "Empty"
    ends = end_offsets(client, topic_name)
    assert committed(client, group) == {(topic_name, p): e for p, e in enumerate(ends)}
    reset = client.post(f"/v1/groups/{group}/offsets/reset", json={"to": "earliest", "topics": [topic_name]})
    assert reset.status_code == 200, reset.text
    assert committed(client, group) == {(topic_name, 0): 0, (topic_name, 1): 0}
    lag = {(o["topic"], o["partition"]): o["lag"] for o in client.get(f"/v1/groups/{group}/offsets").json()["offsets"]}
    assert lag == {(topic_name, p): e for p, e in enumerate(ends)}
    assert group in [g["group"] for g in client.get("/v1/groups").json()["groups"]]


def test_group_resumes_from_committed_offsets_after_restart(start_server, topic_name: str) -> None:
    group = f"g-{topic_name}"
    server = start_server()
    with server.client() as c:
        create_topic(c, topic_name, 3)
        produce_numbered(c, topic_name, 0, 300)
        m = Member(c, group, topics=[topic_name], **{"auto.offset.reset": "earliest", "enable.auto.commit": False})
        m.heartbeat()
        seen = m.poll(max_records=120)
        assert m.commit(seen).status_code == 200
        before = committed(c, group)
    server.stop()  # graceful: pending commits written
    server = start_server()
    with server.client() as c:
        assert committed(c, group) == before
        gone = c.post(f"/v1/groups/{group}/members/{m.member_id}/heartbeat")
        assert gone.status_code == 404  # members rejoin after a restart
        again = Member(c, group, topics=[topic_name], **{"auto.offset.reset": "earliest"})
        again.heartbeat()
        rest: list[dict[str, Any]] = []
        while True:
            batch = again.poll(max_records=500)
            if not batch:
                break
            rest.extend(batch)
    first = {int(r["value"]) for r in seen}
    assert first.isdisjoint(int(r["value"]) for r in rest), "committed records were read again"
    assert first | {int(r["value"]) for r in rest} == set(range(300)), "a record was skipped"


def test_group_errors(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 1)
    bad = [
        ({"topics": [topic_name], "colour": 1}, 422),
        ({"topics": [topic_name], "pattern": "x.*"}, 422),
        ({}, 422),
        ({"topics": ["no-such-topic"]}, 404),
        ({"topics": [topic_name], "assignor": "sticky"}, 422),
        ({"topics": [topic_name], "session.timeout.ms": 10}, 422),
    ]
    for body, status in bad:
        response = client.post(f"/v1/groups/g-{topic_name}/members", json=body)
        assert response.status_code == status, (body, response.text)
    assert client.get(f"/v1/groups/g-{topic_name}").status_code == 404
    assert client.post(f"/v1/groups/g-{topic_name}/offsets", json={
        "offsets": [{"topic": topic_name, "partition": 3, "offset": 1}]}).status_code == 404
