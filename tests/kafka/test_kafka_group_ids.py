"""Any non-empty group id works, as with Kafka (issue 40: librdkafka's test 0132 names a group
"roundrobin,range"; lakelog used to refuse anything but [a-zA-Z0-9._-] with INVALID_GROUP_ID). A
confluent-kafka consumer commits and fetches its offsets, a second consumer of the group resumes from
them, the admin client lists, describes and deletes the group, and the HTTP API answers for it under its
URL-encoded id. The empty group id stays refused, as Kafka refuses it.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.protocol.consumer import JoinGroupRequest

from tests.http.conftest import ThreadServer, start_server  # noqa: F401  (the fixture)
from tests.kafka.raw_calls import call
from tests.patience import STUCK_S

GROUPS = [
    "roundrobin,range",  # librdkafka's test 0132
    "a group/with 'quotes\" and; \\ ünïcødé ☃ %2F",  # spaces, a slash, quotes, SQL's and URLs' specials
    "x" * 300,  # longer than a file name may be
]
TOPIC = "odd-groups"


@pytest.fixture
def server(start_server: Any) -> ThreadServer:  # noqa: F811
    server = start_server()
    response = httpx.post(f"{server.url}/v1/topics", json={"name": TOPIC, "partitions": 1}, timeout=STUCK_S)
    assert response.status_code == 201, response.text
    records = [{"key": f"k{i}", "value": str(i)} for i in range(10)]
    response = httpx.post(f"{server.url}/v1/topics/{TOPIC}/records", json={"records": records}, timeout=STUCK_S)
    assert response.status_code == 200, response.text
    return server


def consumer(server: ThreadServer, group: str) -> Consumer:
    member = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                       "enable.auto.commit": False, "session.timeout.ms": 6000})
    member.subscribe([TOPIC])
    return member


def first_offsets(member: Consumer, count: int) -> list[int]:
    offsets: list[int] = []
    deadline = time.monotonic() + STUCK_S
    while len(offsets) < count and time.monotonic() < deadline:
        message = member.poll(0.5)
        if message is None:
            continue
        assert message.error() is None, message.error()
        offsets.append(message.offset())
    return offsets


@pytest.mark.parametrize("group", GROUPS, ids=["comma", "odd-characters", "long"])
def test_any_group_id_commits_fetches_and_resumes(server: ThreadServer, group: str) -> None:
    first = consumer(server, group)
    try:
        assert first_offsets(first, 4) == [0, 1, 2, 3]
        answered = first.commit(offsets=[TopicPartition(TOPIC, 0, 4)], asynchronous=False)
        assert [tp.error for tp in answered] == [None]
        (fetched,) = first.committed([TopicPartition(TOPIC, 0)], timeout=STUCK_S)  # OffsetFetch
        assert (fetched.offset, fetched.error) == (4, None)
    finally:
        first.close()

    second = consumer(server, group)
    try:
        assert first_offsets(second, 1) == [4]  # resumed from the committed offset
    finally:
        second.close()

    path = f"{server.url}/v1/groups/{quote(group, safe='')}"
    offsets = httpx.get(f"{path}/offsets", timeout=STUCK_S)
    assert offsets.status_code == 200, offsets.text
    assert [(o["topic"], o["partition"], o["offset"]) for o in offsets.json()["offsets"]] == [(TOPIC, 0, 4)]
    described = httpx.get(path, timeout=STUCK_S)
    assert described.status_code == 200 and described.json()["group"] == group, described.text

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    listed = admin.list_consumer_groups().result(timeout=STUCK_S)
    assert group in {g.group_id for g in listed.valid}
    (description,) = admin.describe_consumer_groups([group]).values()
    assert description.result(timeout=STUCK_S).group_id == group
    (fetch,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    assert [(tp.topic, tp.offset) for tp in fetch.result(timeout=STUCK_S).topic_partitions] == [(TOPIC, 4)]
    (deleted,) = admin.delete_consumer_groups([group]).values()
    deleted.result(timeout=STUCK_S)
    assert httpx.get(f"{path}/offsets", timeout=STUCK_S).status_code == 404  # its offsets went with it


def test_the_empty_group_id_is_refused(server: ThreadServer) -> None:
    request = JoinGroupRequest(group_id="", session_timeout_ms=6000, rebalance_timeout_ms=6000, member_id="",
                               protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                                   name="range", metadata=b"")])
    assert call(server.bootstrap, request, 1).error_code == KafkaError.INVALID_GROUP_ID
    assert httpx.get(f"{server.url}/v1/groups", timeout=STUCK_S).json()["groups"] == []
