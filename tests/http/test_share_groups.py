"""Share groups (KIP-932, queues) over HTTP, with the Python client's ShareConsumer against a real server:
two consumers share one partition, a released record comes back with a higher delivery count, a rejected
one never comes back and is dead-lettered with its reason, every other record is accepted exactly once, and
the share-partition's state outlives a restart. Every test ends with the offset scan."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Callable

import httpx

from lakelog.client import AcknowledgeType, KafkaError, Message, ShareConsumer, TopicPartition
from lakelog.ingest_api.share_models import (
    ShareAckResponse,
    ShareConfig,
    ShareGroupDescription,
    ShareGroupList,
    ShareMembership,
    SharePollResponse,
)
from tests.http.conftest import ThreadServer, create_topic
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S


def produce(client: httpx.Client, topic: str, values: list[str]) -> None:
    response = client.post(f"/v1/topics/{topic}/records", json={"records": [{"value": v} for v in values]})
    assert response.status_code == 200, response.text


def configure(client: httpx.Client, group: str, **config: Any) -> dict[str, Any]:
    response = client.put(f"/v1/share-groups/{group}/config", json={"config": config})
    assert response.status_code == 200, response.text
    return response.json()


def describe(client: httpx.Client, group: str) -> dict[str, Any]:
    response = client.get(f"/v1/share-groups/{group}")
    assert response.status_code == 200, response.text
    return response.json()


def share_consumer(server: ThreadServer, group: str, errors: list[Any], **config: Any) -> ShareConsumer:
    def on_commit(error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if error is not None:
            errors.append((error.code(), error.str(), partitions))

    return ShareConsumer({"bootstrap.servers": server.url, "group.id": group,
                          "share.acknowledgement.mode": "explicit", "on_commit": on_commit,
                          "fetch.wait.max.ms": 200, **config})


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + STUCK_S
    while not condition():
        assert time.monotonic() < deadline, f"stuck: {what}"


def test_two_consumers_share_a_partition_release_reject_and_accept_once(start_server: Callable[..., ThreadServer]
                                                                         ) -> None:
    server = start_server()
    client = server.client()
    create_topic(client, "jobs")
    create_topic(client, "jobs-dlq")
    configure(client, "workers", **{"share.auto.offset.reset": "earliest",
                                    "errors.deadletterqueue.topic.name": "jobs-dlq"})
    values = [f"job-{i}" for i in range(120)]
    produce(client, "jobs", values)
    errors: list[Any] = []
    consumers = [share_consumer(server, "workers", errors, **{"max.poll.records": 7}) for _ in range(2)]
    for consumer in consumers:
        consumer.subscribe(["jobs"])
    assert [c.assignment() for c in consumers] == [[TopicPartition("jobs", 0)]] * 2  # one partition, shared

    accepted: Counter[str] = Counter()
    seen: list[tuple[int, str, int]] = []  # (consumer, value, delivery count)

    def work(index: int, consumer: ShareConsumer) -> None:
        for message in consumer.poll(0.2):
            value = (message.value() or b"").decode()
            count = message.delivery_count()
            assert count is not None
            seen.append((index, value, count))
            if value == "job-7":
                consumer.acknowledge(message, AcknowledgeType.REJECT)
            elif value == "job-3" and count == 1:
                consumer.acknowledge(message, AcknowledgeType.RELEASE)
            else:
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                accepted[value] += 1

    def done() -> bool:
        for index, consumer in enumerate(consumers):
            work(index, consumer)
        return len(accepted) == len(values) - 1

    until(done, "every record but the rejected one accepted")
    for consumer in consumers:
        assert consumer.commit_sync() is not None  # the last acknowledgements, durable
    assert errors == []
    assert {index for index, _, _ in seen} == {0, 1}  # both consumers got records
    assert [count for _, value, count in seen if value == "job-3"] == [1, 2]  # released: came back, counted
    assert [value for _, value, _ in seen].count("job-7") == 1  # rejected: never again
    assert set(accepted) == set(values) - {"job-7"} and set(accepted.values()) == {1}
    assert Counter(value for _, value, _ in seen) == Counter({**{v: 1 for v in values}, "job-3": 2})

    view = describe(client, "workers")
    assert [(p["start_offset"], p["in_flight"]) for p in view["partitions"]] == [(len(values), [])]
    assert len(view["members"]) == 2
    for consumer in consumers:
        consumer.close()
    assert describe(client, "workers")["members"] == []

    server.settle()
    letters = client.get("/v1/topics/jobs-dlq/partitions/0/records", params={"offset": 0}).json()["records"]
    assert [r["value"] for r in letters] == ["job-7"]
    headers = {h["key"]: h["value"] for h in letters[0]["headers"]}
    assert headers["lakelog.dlq.reason"] == "rejected"
    assert (headers["lakelog.dlq.topic"], headers["lakelog.dlq.offset"]) == ("jobs", "7")
    client.close()
    assert_topic_intact(server.root, "jobs")
    assert_topic_intact(server.root, "jobs-dlq")


def test_share_partition_state_outlives_a_restart(start_server: Callable[..., ThreadServer]) -> None:
    server = start_server()
    client = server.client()
    create_topic(client, "tasks")
    configure(client, "restarts", **{"share.auto.offset.reset": "earliest"})
    produce(client, "tasks", [f"t{i}" for i in range(10)])
    errors: list[Any] = []
    consumer = share_consumer(server, "restarts", errors, **{"max.poll.records": 10})
    consumer.subscribe(["tasks"])
    got: list[Message] = []
    until(lambda: bool(got.extend(consumer.poll(0.2))) or len(got) == 10, "ten records delivered")
    for message in got[:5]:
        consumer.acknowledge(message)
    consumer.commit_sync()
    view = describe(client, "restarts")["partitions"][0]
    assert view["start_offset"] == 5
    assert [(r["offset"], r["state"], r["delivery_count"]) for r in view["in_flight"]] == [
        (o, "acquired", 1) for o in range(5, 10)]
    client.close()

    server.stop()  # the member's records were never acknowledged: after the restart they come back
    server = start_server(port=server.port)
    client = server.client()
    view = describe(client, "restarts")
    assert view["members"] == []
    assert view["partitions"][0]["start_offset"] == 5
    assert [(r["offset"], r["state"], r["delivery_count"]) for r in view["partitions"][0]["in_flight"]] == [
        (o, "available", 1) for o in range(5, 10)]
    produce(client, "tasks", [f"t{i}" for i in range(10, 15)])

    again: list[Message] = []  # the same consumer: the server forgot its member, it joins again
    until(lambda: bool(again.extend(consumer.poll(0.2))) or len(again) >= 10, "the rest delivered")
    assert [(m.offset(), m.delivery_count()) for m in again] == [(o, 2) for o in range(5, 10)] + [
        (o, 1) for o in range(10, 15)]
    for message in again:
        consumer.acknowledge(message)
    consumer.close()
    assert errors == []
    assert describe(client, "restarts")["partitions"][0] == {
        "topic": "tasks", "partition": 0, "start_offset": 15, "next_offset": 15, "in_flight": []}
    client.close()
    assert_topic_intact(server.root, "tasks")


def test_http_answers_and_errors(start_server: Callable[..., ThreadServer]) -> None:
    server = start_server()
    client = server.client()
    create_topic(client, "q")
    assert client.post("/v1/share-groups/g/members", json={"topics": ["nope"]}).status_code == 404
    assert client.put("/v1/share-groups/g/config",
                      json={"config": {"share.delivery.count.limit": 99}}).json()["error_code"] == "INVALID_CONFIG"
    config = configure(client, "g", **{"share.record.lock.duration.ms": 1000, "share.delivery.count.limit": 2,
                                       "share.auto.offset.reset": "earliest"})
    assert config["overrides"] == ["share.auto.offset.reset", "share.delivery.count.limit",
                                   "share.record.lock.duration.ms"]
    assert config["config"]["share.isolation.level"] == "read_uncommitted"
    produce(client, "q", ["a", "b"])
    joined = client.post("/v1/share-groups/g/members", json={"topics": ["q"], "client_id": "curl"})
    assert joined.status_code == 201, joined.text
    member = joined.json()["member_id"]
    assert joined.json()["assignment"] == [{"topic": "q", "partition": 0}]
    polled = client.post(f"/v1/share-groups/g/members/{member}/poll", json={"timeout_ms": 5000, "max_records": 1})
    assert [(r["value"], r["delivery_count"]) for r in polled.json()["records"]] == [("a", 1)]
    # The lock runs out (1 s): "a" goes back to the group, and a late acknowledgement is refused.
    until(lambda: describe(client, "g")["partitions"][0]["in_flight"][0]["state"] == "available", "lock expired")
    late = client.post(f"/v1/share-groups/g/members/{member}/acks",
                       json={"acks": [{"topic": "q", "partition": 0, "offset": 0, "type": "accept"}]})
    assert late.json()["failed_acks"][0]["error_code"] == "INVALID_RECORD_STATE"
    polled = client.post(f"/v1/share-groups/g/members/{member}/poll", json={"timeout_ms": 5000})
    assert [(r["value"], r["delivery_count"]) for r in polled.json()["records"]] == [("a", 2), ("b", 1)]
    released = client.post(f"/v1/share-groups/g/members/{member}/acks", json={"acks": [
        {"topic": "q", "partition": 0, "offset": 0, "type": "release"},
        {"topic": "q", "partition": 0, "offset": 1, "type": "accept"}]})
    assert released.json() == {"failed_acks": []}
    view = describe(client, "g")  # released at the delivery limit: archived, the window moves past it
    assert (view["partitions"][0]["start_offset"], view["members"][0]["client_id"]) == (2, "curl")
    assert client.get("/v1/share-groups").json()["groups"] == [
        {"group": "g", "type": "share", "state": "Stable", "members": 1}]
    assert client.delete("/v1/share-groups/g").json()["error_code"] == "NON_EMPTY_GROUP"
    assert client.delete(f"/v1/share-groups/g/members/{member}").status_code == 204
    gone = client.post(f"/v1/share-groups/g/members/{member}/heartbeat", json={})
    assert (gone.status_code, gone.json()["error_code"]) == (404, "UNKNOWN_MEMBER_ID")
    assert client.delete("/v1/share-groups/g").status_code == 204
    assert client.get("/v1/share-groups/g").status_code == 404
    client.close()
    assert_topic_intact(server.root, "q")


def test_heartbeats_keep_a_consumer_that_does_not_poll(start_server: Callable[..., ThreadServer]) -> None:
    """A member silent for group.share.session.timeout.ms is removed; the ShareConsumer's heartbeat thread keeps
    one that is busy (not polling) in the group, with the records it holds."""
    server = start_server(group_share_session_timeout_ms=1000)
    client = server.client()
    create_topic(client, "slow")
    configure(client, "busy", **{"share.auto.offset.reset": "earliest"})
    produce(client, "slow", ["a", "b"])
    errors: list[Any] = []
    consumer = share_consumer(server, "busy", errors, **{"heartbeat.interval.ms": 100, "max.poll.records": 1})
    consumer.subscribe(["slow"])
    got: list[Message] = []
    until(lambda: bool(got.extend(consumer.poll(0.2))) or bool(got), "a record delivered")
    member = describe(client, "busy")["members"][0]["member_id"]
    silent = client.post("/v1/share-groups/busy/members", json={"topics": ["slow"]}).json()["member_id"]
    deadline = time.monotonic() + 3  # three session timeouts without a poll
    until(lambda: time.monotonic() > deadline, "three session timeouts")
    view = describe(client, "busy")
    assert [m["member_id"] for m in view["members"]] == [member]  # the silent one (no heartbeat) is gone
    assert view["partitions"][0]["in_flight"][0]["owner"] == member
    assert client.post(f"/v1/share-groups/busy/members/{silent}/heartbeat").status_code == 404
    consumer.acknowledge(got[0])
    consumer.close()  # implicit or not, an explicit ACCEPT goes with the close
    assert errors == []
    assert describe(client, "busy")["partitions"][0]["start_offset"] == 1
    client.close()
    assert_topic_intact(server.root, "slow")


def test_answers_match_their_documented_shapes(start_server: Callable[..., ThreadServer]) -> None:
    server = start_server()
    client = server.client()
    create_topic(client, "shapes")
    configure(client, "s", **{"share.auto.offset.reset": "earliest"})
    produce(client, "shapes", ["x"])
    joined = ShareMembership.model_validate(client.post("/v1/share-groups/s/members", json={"topics": ["shapes"]})
                                            .json())
    path = f"/v1/share-groups/s/members/{joined.member_id}"
    polled = SharePollResponse.model_validate(client.post(f"{path}/poll", json={"timeout_ms": 5000}).json())
    assert [(r.value, r.delivery_count) for r in polled.records] == [("x", 1)]
    ShareGroupDescription.model_validate(describe(client, "s"))
    ShareMembership.model_validate(client.post(f"{path}/heartbeat", json={}).json())
    acked = client.post(f"{path}/acks", json={"acks": [{"topic": "shapes", "partition": 0, "offset": 0}]})
    assert ShareAckResponse.model_validate(acked.json()).failed_acks == []
    ShareGroupList.model_validate(client.get("/v1/share-groups").json())
    ShareConfig.model_validate(client.get("/v1/share-groups/s/config").json())
    client.close()
    assert_topic_intact(server.root, "shapes")


def test_implicit_mode_accepts_what_the_last_poll_handed_out(start_server: Callable[..., ThreadServer]) -> None:
    server = start_server()
    client = server.client()
    create_topic(client, "implicit")
    configure(client, "auto", **{"share.auto.offset.reset": "earliest"})
    produce(client, "implicit", [f"r{i}" for i in range(5)])
    errors: list[Any] = []
    consumer = share_consumer(server, "auto", errors, **{"share.acknowledgement.mode": "implicit",
                                                          "max.poll.records": 2})
    consumer.subscribe(["implicit"])
    polls: list[list[int]] = []

    def poll() -> bool:
        got = consumer.poll(0.2)
        if got:
            polls.append([m.offset() for m in got])
        return sum(map(len, polls)) == 5

    until(poll, "five records delivered")
    assert polls == [[0, 1], [2, 3], [4]]  # each poll accepted the one before's
    assert describe(client, "auto")["partitions"][0]["start_offset"] == 4  # the last poll's: not yet
    assert set(consumer.commit_sync().values()) == {None}
    assert describe(client, "auto")["partitions"][0]["start_offset"] == 5
    consumer.close()
    assert errors == []
    client.close()
    assert_topic_intact(server.root, "implicit")
