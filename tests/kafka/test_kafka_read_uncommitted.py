"""`isolation.level=read_uncommitted` against a running lakelog: it reads what read_committed reads. An open
transaction's records are staged outside the table and are not answered; the consumer waits at the last
stable offset, so a non-transactional record produced after the open transaction's offsets comes only once
that transaction ends (Kafka would answer both at once). ListOffsets `latest` answers the high watermark.
Ends with the offset scan."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.http import conftest as http_conftest
from tests.kafka.test_kafka_transactions import create_topics, transactional, watermarks
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

start_server = http_conftest.start_server  # the fixture
QUIET_S = 2.0  # how long nothing must arrive while the transaction is open


def test_read_uncommitted_waits_at_the_last_stable_offset_and_then_reads_in_order(start_server) -> None:
    server = start_server()
    create_topics(server.bootstrap, "mixed")
    txn = transactional(server.bootstrap, "open")
    txn.begin_transaction()
    txn.produce("mixed", value=b"in-transaction", partition=0)
    txn.flush(STUCK_S)
    plain = Producer({"bootstrap.servers": server.bootstrap})
    plain.produce("mixed", value=b"plain", partition=0)
    assert plain.flush(STUCK_S) == 0

    assert watermarks(server.bootstrap, "mixed", "read_uncommitted") == (0, 2)  # the high watermark
    assert watermarks(server.bootstrap, "mixed", "read_committed") == (0, 0)  # the last stable offset
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "uncommitted",
                         "isolation.level": "read_uncommitted", "enable.auto.commit": False})
    consumer.assign([TopicPartition("mixed", 0, 0)])
    got: list[tuple[int, bytes]] = []
    try:
        quiet_until = time.monotonic() + QUIET_S
        while time.monotonic() < quiet_until:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                got.append((message.offset(), message.value()))
        assert got == []  # neither the open transaction's record nor the one after its offsets

        txn.commit_transaction(STUCK_S)
        deadline = time.monotonic() + STUCK_S
        while len(got) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert got == [(0, b"in-transaction"), (1, b"plain")]
    assert_topic_intact(server.root, "mixed")
