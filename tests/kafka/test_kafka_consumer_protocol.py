"""KIP-848's consumer group protocol (`group.protocol=consumer`) with an unmodified confluent-kafka against a
running server: the coordinator assigns, members split a topic's partitions, read every record once,
commit (OffsetCommit v9 with the member epoch), and a new member makes the partitions move, each always
owned by one member. Checked over HTTP and with ConsumerGroupDescribe, and the topic's log scanned at the end.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Iterator

import httpx
import pytest
from confluent_kafka import Consumer
from kafka.protocol.admin import ListGroupsRequest
from kafka.protocol.metadata import MetadataRequest

from lakelog.kafka_api.errors import CODES
from lakelog.kafka_api.messages import ConsumerGroupDescribeRequest
from tests.http.conftest import ThreadServer, start_server  # noqa: F401  (the fixture)
from tests.kafka.raw_calls import call
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

TOPIC, PARTITIONS, GROUP = "kip848", 4, "next-gen"


@pytest.fixture
def server(start_server: Any) -> ThreadServer:  # noqa: F811
    server = start_server(group_consumer_heartbeat_interval_ms=500)
    response = httpx.post(f"{server.url}/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}, timeout=10)
    assert response.status_code == 201, response.text
    return server


@pytest.fixture
def consumers(server: ThreadServer) -> Iterator[Callable[[str], Consumer]]:
    made: list[Consumer] = []

    def make(name: str) -> Consumer:
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                             "client.id": name, "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([TOPIC])
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close()


def produce(server: ThreadServer, start: int, count: int) -> None:
    records = [{"key": f"k{i}", "value": str(i), "partition": i % PARTITIONS} for i in range(start, start + count)]
    response = httpx.post(f"{server.url}/v1/topics/{TOPIC}/records", json={"records": records}, timeout=30)
    assert response.status_code == 200, response.text


def owned(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment() if tp.topic == TOPIC}


def poll_until(members: list[Consumer], done: Callable[[], bool], seen: list[tuple[str, int, int]]) -> None:
    """Poll every member in turn (each record committed synchronously once read) until `done`."""
    deadline = time.monotonic() + STUCK_S
    while not done():
        assert time.monotonic() < deadline, f"stuck: assignments {[sorted(owned(m)) for m in members]}"
        for member in members:
            message = member.poll(0.1)
            if message is None or message.error() is not None:
                continue
            seen.append((message.value().decode(), message.partition(), message.offset()))
            member.commit(message=message, asynchronous=False)


def split(members: list[Consumer]) -> bool:
    """Each partition owned by exactly one member, every member owning some."""
    sets = [owned(m) for m in members]
    return all(sets) and sum(len(s) for s in sets) == PARTITIONS and set().union(*sets) == set(range(PARTITIONS))


def committed(server: ThreadServer) -> dict[int, int]:
    response = httpx.get(f"{server.url}/v1/groups/{GROUP}/offsets", timeout=10)
    assert response.status_code == 200, response.text
    return {o["partition"]: o["offset"] for o in response.json()["offsets"] if o["topic"] == TOPIC}


def test_members_split_read_once_commit_and_rebalance(server: ThreadServer,
                                                      consumers: Callable[[str], Consumer]) -> None:
    first, second = consumers("first"), consumers("second")
    seen: list[tuple[str, int, int]] = []
    poll_until([first, second], lambda: split([first, second]), seen)
    assert seen == []

    produce(server, 0, 200)
    poll_until([first, second], lambda: len(seen) >= 200, seen)
    assert sorted(int(v) for v, _, _ in seen) == list(range(200))  # every record, exactly once
    assert len({(p, o) for _, p, o in seen}) == 200
    assert committed(server) == {p: 50 for p in range(PARTITIONS)}

    description = httpx.get(f"{server.url}/v1/groups/{GROUP}", timeout=10).json()
    assert description["type"] == "consumer"
    (group,) = call(server.bootstrap, ConsumerGroupDescribeRequest(group_ids=[GROUP],
                                                                   include_authorized_operations=False), 1).groups
    assert group.error_code == 0 and group.assignor_name == "uniform"
    assert sorted(p for m in group.members for t in m.assignment.topic_partitions for p in t.partitions) == \
        list(range(PARTITIONS))

    listed = call(server.bootstrap, ListGroupsRequest(states_filter=[], types_filter=["consumer"]), 5).groups
    assert [(g.group_id, g.group_type) for g in listed] == [(GROUP, "consumer")]
    assert call(server.bootstrap, ListGroupsRequest(states_filter=[], types_filter=["classic"]), 5).groups == []

    third = consumers("third")
    members = [first, second, third]
    poll_until(members, lambda: split(members), seen)
    produce(server, 200, 100)
    poll_until(members, lambda: len(seen) >= 300, seen)
    assert sorted(int(v) for v, _, _ in seen) == list(range(300))
    assert committed(server) == {p: 75 for p in range(PARTITIONS)}
    assert split(members)
    assert_topic_intact(server.root, TOPIC)


def test_metadata_names_a_topic_asked_for_by_id(server: ThreadServer) -> None:
    """librdkafka's KIP-848 consumer resolves its assignment's topic ids with Metadata v10+ by id alone."""
    known = call(server.bootstrap, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)],
                                                   allow_auto_topic_creation=False), 12).topics[0]
    by_id = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(topic_id=known.topic_id, name=None),
                                    MetadataRequest.MetadataRequestTopic(topic_id=uuid.uuid4(), name=None)],
                            allow_auto_topic_creation=False)
    found, unknown = call(server.bootstrap, by_id, 12).topics
    assert (found.error_code, found.name, len(found.partitions)) == (0, TOPIC, PARTITIONS)
    assert unknown.error_code == CODES["UNKNOWN_TOPIC_ID"] and unknown.name is None
