"""Kafka transactions on a two-node cluster: confluent-kafka's transactional producer, bootstrapped at one
node, writes one transaction across eight topics led by both nodes and aborts it, then commits another.
Its transactional id's coordinator is one node; the batches go to each topic's leader, which verifies
them on the stored state when it does not coordinate the id. A read_committed consumer at the other node
sees exactly the committed records; the tables hold no aborted record; the offset scan passes. The
consumed input's offsets go with the commit (`send_offsets_to_transaction`) for a group whose coordinator
is the other node: they are staged there and written by the id's coordinator, and the group's node
answers them once the transaction is over. The input is produced on the node journal, and each
reservation follows the topic's journaled records."""

from __future__ import annotations

from pathlib import Path

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition

from lakelog.platform.cluster.ownership import group_key, owner, transaction_key

from tests.cluster.cluster_nodes import two_nodes_leading, wait_until
from tests.log_check import aborted_ranges, assert_topic_intact
from tests.patience import STUCK_S

TOPICS = [f"tx{i}" for i in range(8)]
TRANSACTIONAL_ID = "spread"
# A group coordinated by the node that does not coordinate the transactional id.
GROUP = next(g for g in (f"etl{i}" for i in range(100))
             if owner(group_key(g), ["n1", "n2"]) != owner(transaction_key(TRANSACTIONAL_ID), ["n1", "n2"]))


def test_a_transaction_across_topics_led_by_both_nodes(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    env: dict[str, str] = {}
    with two_nodes_leading(root, {topic: 1 for topic in TOPICS}, env) as (nodes, leaders):
        assert set(leaders.values()) == {"n1", "n2"}

        httpx.post(nodes[0].url + "/v1/topics", json={"name": "src", "partitions": 1},
                   timeout=STUCK_S).raise_for_status()
        source = Producer({"bootstrap.servers": nodes[0].bootstrap})
        for i in range(3):
            source.produce("src", value=b"in-%d" % i, partition=0)
        assert source.flush(STUCK_S) == 0
        reader = Consumer({"bootstrap.servers": nodes[0].bootstrap, "group.id": GROUP,
                           "auto.offset.reset": "earliest", "enable.auto.commit": False})
        reader.subscribe(["src"])
        inputs: list[bytes] = []

        def consumed() -> bool:  # an empty poll (the group still joining) is not the end
            message = reader.poll(0.2)
            if message is not None and not message.error():
                inputs.append(message.value())
            return len(inputs) >= 3

        wait_until(consumed, STUCK_S, lambda: f"{len(inputs)} of 3 inputs")

        producer = Producer({"bootstrap.servers": nodes[0].bootstrap, "transactional.id": TRANSACTIONAL_ID})
        producer.init_transactions(STUCK_S)
        producer.begin_transaction()
        for topic in TOPICS:
            producer.produce(topic, value=b"aborted", partition=0)
        producer.flush(STUCK_S)
        producer.abort_transaction(STUCK_S)
        producer.begin_transaction()
        for topic in TOPICS:
            producer.produce(topic, value=topic.encode(), partition=0)
        producer.send_offsets_to_transaction(reader.position(reader.assignment()), reader.consumer_group_metadata(),
                                             STUCK_S)
        producer.commit_transaction(STUCK_S)
        reader.close()
        group_reader = Consumer({"bootstrap.servers": nodes[1].bootstrap, "group.id": GROUP})
        wait_until(lambda: group_reader.committed([TopicPartition("src", 0)], STUCK_S)[0].offset == 3, STUCK_S,
                   "the group's offset committed with the transaction")
        group_reader.close()

        consumer = Consumer({"bootstrap.servers": nodes[1].bootstrap, "group.id": "check",
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        consumer.subscribe(TOPICS)
        got: list[tuple[str, int, bytes]] = []

        def read() -> bool:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append((message.topic(), message.offset(), message.value()))
            return len(got) >= len(TOPICS)

        wait_until(read, STUCK_S, lambda: f"{len(got)} of {len(TOPICS)} committed records")
        consumer.close()
        assert sorted(got) == [(topic, 2, topic.encode()) for topic in TOPICS]  # 0 was aborted, 1 its marker
        for topic in TOPICS:
            assert aborted_ranges(root, topic) == {0: {0, 1, 3}}  # the aborted record and the two markers
            assert_topic_intact(root, topic)
