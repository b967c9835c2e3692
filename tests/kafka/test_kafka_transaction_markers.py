"""Transaction markers as Kafka's clients expect them (issue 40, found by librdkafka's tests 0061, 0103, 0129
and 0137 and KafkaJS's fetch.spec): each commit or abort marker takes an offset of its own, so the high
watermark and a group's lag count it; a consumer behind a partition that holds only an aborted transaction
reaches the partition's end. confluent-kafka (librdkafka) is the client; Delta readers still see only
records, and each test ends with the offset scan, which reads the markers' offsets as declared empty.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.delta_readers import assert_duckdb_agrees
from tests.http.conftest import start_server  # noqa: F401  (the fixture)
from tests.log_check import aborted_ranges, assert_topic_intact
from tests.patience import STUCK_S


def create_topic(bootstrap: str, name: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(STUCK_S)


def transactional(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(STUCK_S)
    return producer


def read_to_end(bootstrap: str, topic: str, group: str, isolation: str) -> tuple[list[bytes], int]:
    """What a group consumer reads of partition 0 until librdkafka reports the partition's end (or the
    suite's is-stuck bound passes), and its position then; it commits that position."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "isolation.level": isolation, "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + STUCK_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                position = consumer.position([TopicPartition(topic, 0)])[0].offset
                consumer.commit(offsets=[TopicPartition(topic, 0, position)], asynchronous=False)
                return values, position
            values.append(message.value())
        raise AssertionError(f"no end of partition within {STUCK_S} s; read {len(values)} records")
    finally:
        consumer.close()


def lag(bootstrap: str, topic: str, group: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = consumer.committed([TopicPartition(topic, 0)], STUCK_S)[0].offset
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), STUCK_S)
        return high - committed
    finally:
        consumer.close()


def test_a_committed_transactions_marker_takes_an_offset(start_server) -> None:  # noqa: F811
    server = start_server()
    create_topic(server.bootstrap, "marked")
    producer = transactional(server.bootstrap, "marks")
    producer.begin_transaction()
    producer.produce("marked", value=b"one", partition=0)
    producer.produce("marked", value=b"two", partition=0)
    producer.commit_transaction(STUCK_S)

    probe = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "probe"})
    assert probe.get_watermark_offsets(TopicPartition("marked", 0), STUCK_S) == (0, 3)  # Kafka's: 2 records + marker
    probe.close()

    plain = Producer({"bootstrap.servers": server.bootstrap})
    plain.produce("marked", value=b"three", partition=0)
    assert plain.flush(STUCK_S) == 0
    for isolation in ("read_committed", "read_uncommitted"):
        values, position = read_to_end(server.bootstrap, "marked", f"readers-{isolation}", isolation)
        assert values == [b"one", b"two", b"three"]
        assert position == 4  # past the marker at 2 and the record at 3
        assert lag(server.bootstrap, "marked", f"readers-{isolation}") == 0

    assert aborted_ranges(server.root, "marked") == {0: {2}}  # the marker: an offset the table declares empty
    assert [row[3] for row in assert_duckdb_agrees(server.root, "marked")] == [b"one", b"two", b"three"]
    assert_topic_intact(server.root, "marked")


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_a_consumer_reaches_the_end_of_a_partition_holding_only_an_aborted_transaction(
        start_server, isolation: str) -> None:  # noqa: F811
    """librdkafka's 0129: 1,000 records of 1 KB in many batches (max.message.bytes 10,000), aborted."""
    server = start_server()
    create_topic(server.bootstrap, "aborted", **{"max.message.bytes": "10000"})
    producer = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "aborts",
                         "batch.size": 10000, "linger.ms": 5})
    producer.init_transactions(STUCK_S)
    producer.begin_transaction()
    for i in range(1000):
        producer.produce("aborted", value=b"%04d" % i + b"x" * 1020, partition=0)
    producer.flush(STUCK_S)
    producer.abort_transaction(STUCK_S)

    values, position = read_to_end(server.bootstrap, "aborted", "behind-the-abort", isolation)
    assert values == []
    assert position == 1001  # the 1,000 aborted offsets and the abort marker
    assert lag(server.bootstrap, "aborted", "behind-the-abort") == 0
    assert aborted_ranges(server.root, "aborted") == {0: set(range(1001))}
    assert_topic_intact(server.root, "aborted")

