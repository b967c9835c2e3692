"""A KIP-848 group (`group.protocol=consumer`) across a SIGKILL and restart of its node: the restarted node
restores the group's members from `_control/consumer_groups`, and the two confluent-kafka consumers go on with
their member epochs (the group's generation goes on from where it was, as it would not if they had joined a
new group), read every record produced after the restart and none from before their committed offsets.
The topic's log is scanned at the end."""

from __future__ import annotations

import time
from typing import Any, Callable

import httpx
import pytest
from confluent_kafka import Consumer, KafkaException

from lakelog.kafka_api.messages import ConsumerGroupDescribeRequest
from tests.http.conftest import ProcessServer
from tests.kafka.raw_calls import call
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

pytestmark = pytest.mark.slow
TOPIC, GROUP, PARTITIONS = "restarting", "survivors", 2


def produce(server: ProcessServer, start: int, count: int) -> None:
    records = [{"value": str(i), "partition": i % PARTITIONS} for i in range(start, start + count)]
    response = httpx.post(f"{server.url}/v1/topics/{TOPIC}/records", json={"records": records}, timeout=STUCK_S)
    assert response.status_code == 200, response.text


def group(server: ProcessServer) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/v1/groups/{GROUP}", timeout=10)
    return response.json() if response.status_code == 200 else {}


def epochs(server: ProcessServer) -> dict[str, int]:
    (described,) = call(server.bootstrap, ConsumerGroupDescribeRequest(group_ids=[GROUP],
                                                                       include_authorized_operations=False), 1).groups
    return {m.member_id: m.member_epoch for m in described.members}


def poll_until(members: list[Consumer], done: Callable[[], bool], seen: list[tuple[int, int, int]]) -> None:
    deadline = time.monotonic() + STUCK_S
    while not done():
        assert time.monotonic() < deadline, f"stuck: {len(seen)} read"
        for member in members:
            message = member.poll(0.05)
            if message is None or message.error() is not None:
                continue
            seen.append((message.partition(), message.offset(), int(message.value())))
            try:
                member.commit(message=message, asynchronous=False)
            except KafkaException as exc:
                raise AssertionError(f"a commit failed: {exc}") from exc


def stable(server: ProcessServer, count: int) -> bool:
    described = group(server)
    owned = [a["partition"] for m in described.get("members", []) for a in m["assignment"]]
    return described.get("state") == "Stable" and len(described["members"]) == count and \
        sorted(owned) == list(range(PARTITIONS))


def make(server: ProcessServer, name: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                         "client.id": name, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    return consumer


def test_a_consumer_group_goes_on_across_a_restart_of_its_node(tmp_path: Any) -> None:
    server = ProcessServer(str(tmp_path / "root"), {"LAKELOG_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "300"}).start()
    members: list[Consumer] = []
    try:
        created = httpx.post(f"{server.url}/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}, timeout=30)
        assert created.status_code == 201, created.text
        members = [make(server, "first"), make(server, "second")]
        seen: list[tuple[int, int, int]] = []
        poll_until(members, lambda: stable(server, 2), seen)
        third = make(server, "third")  # joins and leaves: the generation moves past a new group's first ones
        poll_until(members + [third], lambda: stable(server, 3), seen)
        third.close()
        poll_until(members, lambda: stable(server, 2), seen)
        produce(server, 0, 40)
        poll_until(members, lambda: len(seen) >= 40, seen)
        before, generation = epochs(server), group(server)["generation"]
        assert generation > 4 and len(before) == 2

        server.kill()
        server.start()  # the same root and ports
        produce(server, 40, 40)
        poll_until(members, lambda: len(seen) >= 80, seen)
        assert sorted(v for _, _, v in seen) == list(range(80))  # each once: nothing before the commits again
        after = epochs(server)
        assert set(after) == set(before) and all(after[m] >= before[m] for m in before)
        assert group(server)["generation"] >= generation  # restored, not a new group its members joined
        offsets = httpx.get(f"{server.url}/v1/groups/{GROUP}/offsets", timeout=10).json()["offsets"]
        assert {o["partition"]: o["offset"] for o in offsets} == {p: 40 for p in range(PARTITIONS)}
    finally:
        for member in members:
            member.close()
        server.terminate()
    assert_topic_intact(server.root, TOPIC)
