"""Committed offsets as Kafka keeps them (issue 24), over a socket against a running server, checked over HTTP:
OffsetCommit stores any offset (KafkaJS's resetOffsets commits -1 and -2), OffsetDelete removes a group's
offsets as Kafka does, and `__consumer_offsets` carries every commit in Kafka's record format for the
tools that read it, read-only.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterator

import httpx
import kafka.errors as kerrors
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.protocol.consumer import OffsetCommitRequest
from kafka.structs import OffsetAndMetadata

from lakelog.platform.groups import offsets_topic as ot
from tests.http.conftest import ThreadServer, start_server  # noqa: F401  (the fixture)
from tests.kafka.raw_calls import call
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S


@pytest.fixture
def server(start_server: Any) -> ThreadServer:  # noqa: F811
    server = start_server()
    for name, count in (("orders", 2), ("audit", 1)):
        response = httpx.post(f"{server.url}/v1/topics", json={"name": name, "partitions": count}, timeout=10)
        assert response.status_code == 201, response.text
        records = [{"key": f"k{i}", "value": str(i), "partition": i % count} for i in range(10)]
        assert httpx.post(f"{server.url}/v1/topics/{name}/records", json={"records": records}).status_code == 200
    return server


@pytest.fixture
def kadmin(server: ThreadServer) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10_000)
    yield client
    client.close()


def committed(server: ThreadServer, group: str) -> dict[tuple[str, int], tuple[int, str | None]]:
    response = httpx.get(f"{server.url}/v1/groups/{group}/offsets", timeout=10)
    if response.status_code == 404:
        return {}
    return {(o["topic"], o["partition"]): (o["offset"], o["metadata"]) for o in response.json()["offsets"]}


def commit(kadmin: KafkaAdminClient, group: str, offsets: dict[tuple[str, int], int], metadata: str = "") -> None:
    answers = kadmin.alter_group_offsets(group, {TopicPartition(t, p): OffsetAndMetadata(o, metadata, -1)
                                                 for (t, p), o in offsets.items()})
    assert set(answers.values()) == {kerrors.NoError}, answers


def test_any_offset_is_stored_as_committed(server: ThreadServer, kadmin: KafkaAdminClient) -> None:
    commit(kadmin, "resetters", {("orders", 0): -2, ("orders", 1): -1}, metadata="reset by a tool")
    assert committed(server, "resetters") == {("orders", 0): (-2, "reset by a tool"), ("orders", 1): (-1, "reset by a tool")}

    # v2-v4 carry a retention time: accepted (lakelog keeps offsets until the group is deleted)
    partition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=-1, committed_metadata="v2")
    request = OffsetCommitRequest(group_id="resetters", generation_id_or_member_epoch=-1, member_id="",
                                  retention_time_ms=60_000, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                                      name="audit", partitions=[partition])])
    (topic,) = call(server.bootstrap, request, 2).topics
    assert [p.error_code for p in topic.partitions] == [0]
    assert committed(server, "resetters")[("audit", 0)] == (-1, "v2")

    # a consumer of the group resolves the markers by its own reset policy, as with Kafka
    consumer = KafkaConsumer("orders", bootstrap_servers=server.bootstrap, group_id="resetters",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        records: list[Any] = []
        deadline = time.monotonic() + STUCK_S
        while len(records) < 10 and time.monotonic() < deadline:
            records += [r for batch in consumer.poll(500).values() for r in batch]
        consumer.commit()
    finally:
        consumer.close()
    assert sorted((r.partition, r.offset) for r in records) == [(p, o) for p in (0, 1) for o in range(5)]
    assert committed(server, "resetters")[("orders", 0)] == (5, "")
    assert_topic_intact(server.root, "orders")


def test_offset_delete(server: ThreadServer, kadmin: KafkaAdminClient) -> None:
    commit(kadmin, "deleters", {("orders", 0): 3, ("orders", 1): 4, ("audit", 0): 5})
    assert kadmin.delete_group_offsets("deleters", [TopicPartition("orders", 1)]) == {
        TopicPartition("orders", 1): kerrors.NoError}
    assert committed(server, "deleters") == {("orders", 0): (3, ""), ("audit", 0): (5, "")}
    with pytest.raises(kerrors.GroupIdNotFoundError):
        kadmin.delete_group_offsets("nobody", [TopicPartition("orders", 0)])

    # an active member subscribed to orders: its offsets stay (it would commit them again), audit's go
    member = KafkaConsumer("orders", bootstrap_servers=server.bootstrap, group_id="deleters",
                           auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        deadline = time.monotonic() + STUCK_S
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(200)
        answers = kadmin.delete_group_offsets("deleters", [TopicPartition("orders", 0), TopicPartition("audit", 0)])
        assert answers == {TopicPartition("orders", 0): kerrors.GroupSubscribedToTopicError,
                           TopicPartition("audit", 0): kerrors.NoError}
    finally:
        member.close()
    assert committed(server, "deleters") == {("orders", 0): (3, "")}


def test_offsets_left_by_deletes_outlive_a_restart(server: ThreadServer, kadmin: KafkaAdminClient,
                                                   start_server: Any) -> None:  # noqa: F811
    """OffsetDelete and DeleteGroups rewrite the offsets table's files without the rows deleted (delta-rs's
    delete, which writes string_view columns): the table read at the next start holds the rows left (the
    read used to fail, and a restarted node knew no group's offsets)."""
    commit(kadmin, "kept", {("orders", 0): 3, ("orders", 1): 4, ("audit", 0): 2})  # one commit: one file
    commit(kadmin, "gone", {("orders", 0): 1})
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    (deleted,) = admin.delete_consumer_groups(["gone"]).values()
    deleted.result(timeout=STUCK_S)
    assert kadmin.delete_group_offsets("kept", [TopicPartition("orders", 1)]) == {
        TopicPartition("orders", 1): kerrors.NoError}
    server.stop()

    again = start_server(server.root)
    admin = AdminClient({"bootstrap.servers": again.bootstrap})
    (fetch,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("kept")]).values()
    assert sorted((tp.topic, tp.partition, tp.offset) for tp in fetch.result(timeout=STUCK_S).topic_partitions) \
        == [("audit", 0, 2), ("orders", 0, 3)]
    assert committed(again, "gone") == {}


def read_offsets_topic(server: ThreadServer, group: str, wanted: int) -> list[tuple[Any, Any, int]]:
    """The decoded records of the group's partition of __consumer_offsets, read as a tool reads them."""
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, exclude_internal_topics=False,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(ot.OFFSETS_TOPIC, ot.partition_for(group))])
        found: list[tuple[Any, Any, int]] = []
        deadline = time.monotonic() + STUCK_S
        while len(found) < wanted and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                for r in records:
                    key = ot.decode_key(r.key)
                    value = ot.decode_offset_value(r.value) if isinstance(key, ot.OffsetKey) else \
                        ot.decode_group_generation(r.value)
                    found.append((key, value, r.offset))
        return found
    finally:
        consumer.close()


def test_consumer_offsets_carries_every_commit(server: ThreadServer, kadmin: KafkaAdminClient,
                                               caplog: pytest.LogCaptureFixture) -> None:
    assert "__consumer_offsets" in kadmin.list_topics()
    (described,) = kadmin.describe_topics([ot.OFFSETS_TOPIC])
    assert described["is_internal"] and len(described["partitions"]) == ot.PARTITIONS

    # a group member commits (a generation: a group metadata record first), then an admin tool commits
    consumer = KafkaConsumer("audit", bootstrap_servers=server.bootstrap, group_id="watched",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        got = 0
        deadline = time.monotonic() + STUCK_S
        while got < 10 and time.monotonic() < deadline:
            got += sum(len(batch) for batch in consumer.poll(500).values())
        consumer.commit({TopicPartition("audit", 0): OffsetAndMetadata(10, "done", -1)})
    finally:
        consumer.close()
    commit(kadmin, "watched", {("orders", 1): -1})

    found = read_offsets_topic(server, "watched", 3)
    keys = [key for key, _, _ in found]
    assert keys[:1] == [ot.GroupKey("watched")] and found[0][1][0] == "consumer"
    values = {key: value for key, value, _ in found if isinstance(key, ot.OffsetKey)}
    assert values[ot.OffsetKey("watched", "audit", 0)].offset == 10
    assert values[ot.OffsetKey("watched", "audit", 0)].metadata == "done"
    assert values[ot.OffsetKey("watched", "orders", 1)].offset == -1
    offsets = [offset for _, _, offset in found]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)

    # read-only: a produce is refused as Kafka refuses appends to an internal topic, and logged
    producer = Producer({"bootstrap.servers": server.bootstrap})
    errors: list[Any] = []
    with caplog.at_level(logging.WARNING, logger="lakelog.kafka_api.handlers.offsets_topic"):
        producer.produce(ot.OFFSETS_TOPIC, b"forged", partition=0, on_delivery=lambda err, _: errors.append(err))
        assert producer.flush(STUCK_S) == 0
    assert [e.name() for e in errors] == ["TOPIC_EXCEPTION"]  # INVALID_TOPIC_EXCEPTION
    assert any("refused a produce to __consumer_offsets" in r.getMessage() for r in caplog.records)


def test_a_group_consumes_consumer_offsets_and_commits_its_position(server: ThreadServer,
                                                                   kadmin: KafkaAdminClient) -> None:
    commit(kadmin, "observed", {("orders", 0): 7})
    reader = KafkaConsumer(ot.OFFSETS_TOPIC, bootstrap_servers=server.bootstrap, group_id="offset-reader",
                           exclude_internal_topics=False, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        seen: list[Any] = []
        deadline = time.monotonic() + STUCK_S
        while ot.OffsetKey("observed", "orders", 0) not in seen and time.monotonic() < deadline:
            seen += [ot.decode_key(r.key) for batch in reader.poll(500).values() for r in batch]
        assert ot.OffsetKey("observed", "orders", 0) in seen
        reader.commit()
    finally:
        reader.close()
    home = ot.partition_for("observed")
    position = committed(server, "offset-reader")[(ot.OFFSETS_TOPIC, home)][0]
    assert position > 0  # its position on the internal topic, kept as any other
