"""KIP-932's share groups with confluent-kafka's unmodified `ShareConsumer` (librdkafka's) against a running
server: two consumers in explicit mode share one partition's records; a RELEASEd record comes back with a
higher delivery count; a REJECTed one never comes back (it goes to the group's dead-letter topic); every other
record is ACCEPTed exactly once. Then a SIGKILL of the node: no record whose ACCEPT was answered is delivered
again, and none is lost. Every test ends with the offset scan of the topics.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Callable, Iterator

import httpx
import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from tests.http.conftest import ProcessServer, ThreadServer, start_server  # noqa: F401  (the fixture)
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

ACCEPT, RELEASE, REJECT = 1, 2, 3  # confluent_kafka.AcknowledgeType's values, Kafka's acknowledge types
COUNT = 60


def create(url: str, topic: str, partitions: int = 1) -> None:
    response = httpx.post(f"{url}/v1/topics", json={"name": topic, "partitions": partitions}, timeout=STUCK_S)
    assert response.status_code == 201, response.text


def produce(url: str, topic: str, values: list[str]) -> None:
    response = httpx.post(f"{url}/v1/topics/{topic}/records", json={"records": [{"value": v} for v in values]},
                          timeout=STUCK_S)
    assert response.status_code == 200, response.text


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """Kafka 4's way: IncrementalAlterConfigs on the GROUP resource, with confluent-kafka's AdminClient."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        assert future.result(timeout=STUCK_S) is None


@pytest.fixture
def consumers() -> Iterator[Callable[[str, str, str], ShareConsumer]]:
    made: list[ShareConsumer] = []

    def make(bootstrap: str, group: str, topic: str) -> ShareConsumer:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "share.acknowledgement.mode": "explicit"})
        consumer.subscribe([topic])
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        try:
            consumer.close()
        except Exception:  # closed by the test already, or its broker was killed
            pass


def test_two_share_consumers_split_one_partition_release_reject_and_accept(
        start_server: Any, consumers: Any) -> None:  # noqa: F811
    server: ThreadServer = start_server()
    topic, group, dead = "work", "workers", "work-dead"
    create(server.url, topic)
    create(server.url, dead)
    set_group_configs(server.bootstrap, group, {"share.auto.offset.reset": "earliest",
                                                "errors.deadletterqueue.topic.name": dead})
    produce(server.url, topic, [f"job-{i}" for i in range(COUNT)])
    first, second = consumers(server.bootstrap, group, topic), consumers(server.bootstrap, group, topic)

    per_consumer: Counter[int] = Counter()
    accepted: list[int] = []
    deliveries: dict[int, list[int]] = {}
    released, rejected = 7, 11
    deadline = time.monotonic() + STUCK_S
    while len(accepted) < COUNT - 1:  # all but the rejected one
        assert time.monotonic() < deadline, f"stuck with {len(accepted)} accepted"
        for index, consumer in enumerate((first, second)):
            messages = [m for m in consumer.poll(0.2) if m.error() is None]
            for message in messages:
                offset = message.offset()
                deliveries.setdefault(offset, []).append(message.delivery_count())
                per_consumer[index] += 1
                if offset == released and len(deliveries[offset]) == 1:
                    consumer.acknowledge(message, RELEASE)
                elif offset == rejected:
                    consumer.acknowledge(message, REJECT)
                else:
                    consumer.acknowledge(message, ACCEPT)
                    accepted.append(offset)
            if messages:
                consumer.commit_sync()
        time.sleep(0.2 if not per_consumer[1] else 0)  # the second member joins while the first reads

    assert per_consumer[0] > 0 and per_consumer[1] > 0, f"both consumers get records: {per_consumer}"
    assert deliveries[released] == [1, 2], "the released record came back with a higher delivery count"
    assert deliveries[rejected] == [1], "the rejected record never came back"
    assert sorted(accepted) == [o for o in range(COUNT) if o != rejected], "every other record accepted once"
    for consumer in (first, second):  # nothing more comes: the rejected record stays archived
        assert [m for m in consumer.poll(1.0) if m.error() is None] == []

    letters = httpx.get(f"{server.url}/v1/topics/{dead}/partitions/0/records", params={"offset": 0},
                        timeout=STUCK_S).json()["records"]
    assert [r["value"] for r in letters] == [f"job-{rejected}"]
    headers = {h["key"]: h["value"] for h in letters[0]["headers"]}
    assert headers["lakelog.dlq.reason"] == "rejected" and headers["lakelog.dlq.offset"] == str(rejected)

    for name in (topic, dead):
        assert_topic_intact(server.root, name)


def test_share_state_survives_a_sigkill_of_the_node(tmp_path: Any, consumers: Any) -> None:
    topic, group = "jobs", "crash-workers"
    server = ProcessServer(str(tmp_path / "root")).start()
    try:
        create(server.url, topic)
        set_group_configs(server.bootstrap, group, {"share.auto.offset.reset": "earliest"})
        produce(server.url, topic, [f"job-{i}" for i in range(COUNT)])
        consumer = consumers(server.bootstrap, group, topic)
        answered: set[int] = set()  # ACCEPTs the server answered (commit_sync returned them)
        held: set[int] = set()  # delivered, not acknowledged: locked to the consumer when the node dies
        deadline = time.monotonic() + STUCK_S
        while len(answered) < COUNT // 2:
            assert time.monotonic() < deadline
            messages = [m for m in consumer.poll(0.5) if m.error() is None]
            acked = {m.offset() for m in messages[: max(len(messages) // 2, 1)]}
            for message in messages:
                if message.offset() in acked:
                    consumer.acknowledge(message, ACCEPT)
            if messages:
                outcome = consumer.commit_sync()
                assert all(error is None for error in outcome.values()), outcome
                answered |= acked
                held = {m.offset() for m in messages} - acked
        server.kill()
        server.start()  # the same root and ports

        later = consumers(server.bootstrap, group, topic)
        seen_again: list[int] = []
        deadline = time.monotonic() + STUCK_S
        while len(answered) + len(seen_again) < COUNT:
            assert time.monotonic() < deadline, f"stuck: {len(answered)} + {len(seen_again)} of {COUNT}"
            messages = [m for m in later.poll(0.5) if m.error() is None]
            for message in messages:
                later.acknowledge(message, ACCEPT)
                seen_again.append(message.offset())
            if messages:
                later.commit_sync()
        assert not answered & set(seen_again), "an accepted record was delivered again after the crash"
        assert sorted(answered | set(seen_again)) == list(range(COUNT)), "a record was lost"
        assert len(seen_again) == len(set(seen_again))
        assert held <= set(seen_again)
        assert_topic_intact(server.root, topic)
    finally:
        server.terminate()


def test_share_group_admin_apis_list_describe_and_move_offsets(start_server: Any, consumers: Any) -> None:  # noqa: F811
    """ListGroups by type, ShareGroupDescribe, and Describe/Alter/DeleteShareGroupOffsets, as admin tools call
    them: offsets move only while the group has no members."""
    from kafka.protocol.admin import ListGroupsRequest
    from lakelog.kafka_api.errors import CODES
    from lakelog.kafka_api.messages import (
        AlterShareGroupOffsetsRequest,
        DeleteShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsRequest,
        ShareGroupDescribeRequest,
    )
    from tests.kafka.raw_calls import call

    server: ThreadServer = start_server()
    topic, group = "admin-jobs", "admin-workers"
    create(server.url, topic)
    set_group_configs(server.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    produce(server.url, topic, [f"job-{i}" for i in range(10)])
    worker = consumers(server.bootstrap, group, topic)
    accepted: list[int] = []
    deadline = time.monotonic() + STUCK_S
    while len(accepted) < 10:
        assert time.monotonic() < deadline
        for message in [m for m in worker.poll(0.2) if m.error() is None]:
            worker.acknowledge(message, ACCEPT)
            accepted.append(message.offset())
        worker.commit_sync()

    def offsets() -> dict[tuple[str, int], int]:
        asked = DescribeShareGroupOffsetsRequest(groups=[
            DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)])
        (described,) = call(server.bootstrap, asked, 0, STUCK_S).groups
        assert described.error_code == 0
        return {(t.topic_name, p.partition_index): p.start_offset for t in described.topics for p in t.partitions}

    listed = call(server.bootstrap, ListGroupsRequest(states_filter=[], types_filter=["share"]), 5, STUCK_S).groups
    assert [(g.group_id, g.group_type) for g in listed] == [(group, "share")]
    (described,) = call(server.bootstrap, ShareGroupDescribeRequest(group_ids=[group],
                                                                    include_authorized_operations=False),
                        1, STUCK_S).groups
    assert described.error_code == 0 and described.group_state == "Stable"
    assert [[(t.topic_name, t.partitions) for t in m.assignment.topic_partitions] for m in described.members] == [
        [(topic, [0])]]
    assert offsets() == {(topic, 0): 10}

    move = AlterShareGroupOffsetsRequest(group_id=group, topics=[
        AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
            AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic.AlterShareGroupOffsetsRequestPartition(
                partition_index=0, start_offset=8)])])
    assert call(server.bootstrap, move, 0, STUCK_S).error_code == CODES["NON_EMPTY_GROUP"]
    assert offsets() == {(topic, 0): 10}, "a refused change changes nothing"

    worker.close()
    deadline = time.monotonic() + STUCK_S
    while call(server.bootstrap, move, 0, STUCK_S).error_code != 0:  # the member's leave lands first
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert offsets() == {(topic, 0): 8}
    again = consumers(server.bootstrap, group, topic)
    redelivered: list[int] = []
    deadline = time.monotonic() + STUCK_S
    while len(redelivered) < 2:
        assert time.monotonic() < deadline
        for message in [m for m in again.poll(0.2) if m.error() is None]:
            again.acknowledge(message, ACCEPT)
            redelivered.append(message.offset())
        again.commit_sync()
    assert redelivered == [8, 9]
    again.close()

    forget = DeleteShareGroupOffsetsRequest(group_id=group, topics=[
        DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name=topic)])
    deadline = time.monotonic() + STUCK_S
    while call(server.bootstrap, forget, 0, STUCK_S).error_code != 0:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert offsets() == {}
    assert_topic_intact(server.root, topic)
