"""The catalog, and bad input: every refusal is a typed error that writes nothing."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidRecord,
    InvalidRequest,
    InvalidTopic,
    RecordTooLarge,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)


def _versions(broker: Broker, topic: str | None = None) -> tuple[int, ...]:
    broker.catalog.refresh()
    versions = [broker.catalog.version]
    if topic:
        log = broker.topic_log(topic)
        log.refresh()
        versions.append(log.version)
    return tuple(versions)


def test_create_list_describe_alter_delete(broker: Broker) -> None:
    broker.create_topic("a", 2, {"retention.ms": "60000", "cleanup.policy": "compact,delete"})
    broker.create_topic("b.c_d-e", 1)
    assert [t.name for t in broker.list_topics()] == ["a", "b.c_d-e"]
    meta = broker.describe_topic("a").meta
    assert meta.config.retention_ms == 60000 and meta.config.compacts and meta.config.deletes
    assert meta.config.max_message_bytes == 1_048_588  # Kafka's default
    altered = broker.alter_topic_config("a", {"retention.ms": 1000, "max.message.bytes": "2048"})
    assert (altered.config.retention_ms, altered.config.max_message_bytes) == (1000, 2048)
    assert altered.config.compacts  # untouched keys keep their values
    broker.delete_topic("b.c_d-e")
    assert [t.name for t in broker.list_topics()] == ["a"]
    with pytest.raises(UnknownTopicOrPartition):
        broker.describe_topic("b.c_d-e")


def test_deleted_topic_can_be_recreated_empty(broker: Broker) -> None:
    broker.create_topic("t", 1)
    broker.produce("t", [Record(b"old", partition=0)])
    broker.delete_topic("t")
    broker.create_topic("t", 1)
    assert broker.list_offset("t", 0, "latest") == 0
    assert broker.fetch("t", 0, 0).records.num_rows == 0


def test_a_second_node_sees_the_catalog(make_broker) -> None:
    first, second = make_broker(), make_broker()
    first.create_topic("shared", 4)
    assert second.topic("shared").partitions == 4
    with pytest.raises(TopicAlreadyExists):
        second.create_topic("shared", 1)


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "slash/name", "ünïcode", "semi;colon"])
def test_bad_topic_names_are_refused(local_broker: Broker, name: str) -> None:
    before = _versions(local_broker)
    with pytest.raises(InvalidTopic):
        local_broker.create_topic(name, 1)
    assert _versions(local_broker) == before
    assert not os.path.exists(os.path.join(local_broker.storage.root, "topics", name or "_")) or name in (".", "..")


def test_longest_legal_name_is_accepted(local_broker: Broker) -> None:
    local_broker.create_topic("a" * 249, 1)


@pytest.mark.parametrize("partitions", [0, -1, "3", 1.5, True, None, 10_001])
def test_bad_partition_counts_are_refused(local_broker: Broker, partitions) -> None:
    before = _versions(local_broker)
    with pytest.raises(InvalidPartitions):
        local_broker.create_topic("t", partitions)
    assert _versions(local_broker) == before


@pytest.mark.parametrize("config,named", [
    ({"retention.msx": 1}, "retention.msx"),
    ({"retention.ms": "soon"}, "retention.ms"),
    ({"retention.ms": -2}, "retention.ms"),
    ({"cleanup.policy": "forever"}, "cleanup.policy"),
    ({"message.timestamp.type": "Now"}, "message.timestamp.type"),
    ({"partitioner": "crc32"}, "partitioner"),
    ({"min.insync.replicas": 0}, "min.insync.replicas"),
])
def test_bad_configs_name_the_key_and_change_nothing(local_broker: Broker, config, named) -> None:
    before = _versions(local_broker)
    with pytest.raises(InvalidConfig, match=named.replace(".", r"\.")):
        local_broker.create_topic("t", 1, config)
    assert _versions(local_broker) == before
    local_broker.create_topic("ok", 1)
    before = _versions(local_broker, "ok")
    with pytest.raises(InvalidConfig, match=named.replace(".", r"\.")):
        local_broker.alter_topic_config("ok", config)
    assert _versions(local_broker, "ok") == before


def test_partitions_only_grow(local_broker: Broker) -> None:
    local_broker.create_topic("t", 3)
    before = _versions(local_broker)
    for total in (3, 2):
        with pytest.raises(InvalidPartitions):
            local_broker.add_partitions("t", total)
    assert _versions(local_broker) == before


def test_bad_records_are_refused_and_write_nothing(local_broker: Broker) -> None:
    local_broker.create_topic("t", 2, {"max.message.bytes": 100})
    before = _versions(local_broker, "t")
    cases = [
        ([Record(b"x" * 101)], RecordTooLarge, "max.message.bytes of 100 bytes"),
        ([Record(b"x" * 50, key=b"k" * 51)], RecordTooLarge, "101 bytes"),
        ([Record(b"x", headers=[("h", b"y" * 100)])], RecordTooLarge, "max.message.bytes"),
        ([Record(b"ok"), Record(b"x", partition=2)], UnknownTopicOrPartition, "out of range"),
        ([Record(12345)], InvalidRecord, "bad record field"),  # type: ignore[arg-type]
        ([Record(b"x", timestamp_ms=-5)], InvalidRecord, "timestamps"),
        ([Record(b"x", headers=[(1, b"v")])], InvalidRecord, "header keys"),  # type: ignore[list-item]
        ([], InvalidRecord, "no records"),
        (pa.table({"key": [b"k"]}), InvalidRecord, "'value' column"),
        (pa.table({"value": [1, 2]}), InvalidRecord, "binary or string"),
        (pa.table({"value": [b"v"], "colour": ["red"]}), InvalidRecord, "unknown columns"),
        (pa.table({"value": [b"v"], "timestamp": ["yesterday"]}), InvalidRecord, "timestamp"),
    ]
    for records, error, message in cases:
        with pytest.raises(error, match=message):
            local_broker.produce("t", records)
    with pytest.raises(InvalidRequest):
        local_broker.produce("t", [Record(b"x")], acks=2)
    with pytest.raises(UnknownTopicOrPartition):
        local_broker.produce("missing", [Record(b"x")])  # no auto-creation
    local_broker.flush()
    assert _versions(local_broker, "t") == before
    assert [t.name for t in local_broker.list_topics()] == ["t"]


def test_bad_fetch_arguments(local_broker: Broker) -> None:
    local_broker.create_topic("t", 1)
    with pytest.raises(InvalidRequest):
        local_broker.fetch("t", 0, "5")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        local_broker.fetch("t", 0, 0, max_records=0)
    with pytest.raises(InvalidRequest):
        local_broker.list_offset("t", 0, "yesterday")
