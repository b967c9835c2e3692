"""Fetch's byte limits as librdkafka's test 0082 expects them: the request's total max_bytes bounds the
answer, except that the first partition with records always gets at least one batch. confluent-kafka
(librdkafka) is the client, with its receive limit just above fetch.max.bytes.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.http.conftest import start_server  # noqa: F401  (the fixture)
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S


def test_a_fetch_answers_later_partitions_only_within_the_requests_max_bytes(start_server) -> None:  # noqa: F811
    """librdkafka's 0082: records of 900 KiB in 3 partitions, fetch.max.bytes 1 MB and the client's receive
    limit 512 bytes above it. Only the first partition with records may pass the limit (by one batch); a
    response over the receive limit is an error the consumer reports (it got 2.7 MB before)."""
    server = start_server()
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("big", 3, 1)])["big"].result(STUCK_S)
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0})
    for partition in range(3):
        for i in range(3):
            producer.produce("big", value=bytes([partition * 3 + i]) * (900 * 1024), partition=partition)
    assert producer.flush(STUCK_S) == 0

    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "big-reader",
                         "auto.offset.reset": "earliest", "max.partition.fetch.bytes": 20_000_000,
                         "fetch.max.bytes": 1_000_000, "receive.message.max.bytes": 1_000_512})
    consumer.subscribe(["big"])
    got: set[tuple[int, int]] = set()
    deadline = time.monotonic() + STUCK_S
    try:
        while len(got) < 9 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            assert message.value() == bytes([message.partition() * 3 + message.offset()]) * (900 * 1024)
            got.add((message.partition(), message.offset()))
    finally:
        consumer.close()
    assert got == {(p, o) for p in range(3) for o in range(3)}
    assert_topic_intact(server.root, "big")
