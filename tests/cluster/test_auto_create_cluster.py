"""Topics created on first use on a two-node cluster: both nodes asked at once for the same missing topics
(Metadata, as producers bootstrapped at each node ask) create each one once, through the catalog's
compare-and-set as CreateTopics does, and neither client sees an error (the loser's TOPIC_ALREADY_EXISTS is
swallowed). Producers at both nodes then deliver to every topic."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
from confluent_kafka import Producer
from kafka.protocol.metadata import MetadataRequest

from tests.cluster.cluster_nodes import two_nodes_leading
from tests.kafka import raw_calls
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

TOPICS = [f"raced-{i}" for i in range(8)]


def test_two_nodes_auto_creating_the_same_topics_make_each_once(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    with two_nodes_leading(root, {}, env={"LAKELOG_NUM_PARTITIONS": "2"}) as (nodes, _):
        request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in TOPICS],
                                  allow_auto_topic_creation=True)
        answers: dict[str, list] = {}
        start = threading.Barrier(len(nodes) * 2)

        def ask(node_name: str, bootstrap: str, attempt: int) -> None:
            start.wait()
            answers[f"{node_name}-{attempt}"] = list(raw_calls.call(bootstrap, request, 9, STUCK_S).topics)

        threads = [threading.Thread(target=ask, args=(node.name, node.bootstrap, attempt))
                   for node in nodes for attempt in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(STUCK_S)
        assert len(answers) == 4
        for asker, topics in answers.items():
            assert [(t.name, t.error_code, len(t.partitions)) for t in topics] == [(t, 0, 2) for t in TOPICS], asker

        for node in nodes:
            listed = httpx.get(node.url + "/v1/topics", timeout=STUCK_S).json()["topics"]
            assert sorted(t["name"] for t in listed) == sorted(TOPICS)

        reports: list = []
        for node in nodes:
            producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all",
                                 "message.timeout.ms": int(STUCK_S * 1000)})
            for topic in TOPICS + [f"{node.name}-own"]:  # and one only this node's producer creates
                producer.produce(topic, b"from-" + node.name.encode(), on_delivery=lambda e, m: reports.append(e))
            assert producer.flush(STUCK_S) == 0
        assert reports == [None] * (2 * (len(TOPICS) + 1))
        for topic in TOPICS + ["n1-own", "n2-own"]:
            assert_topic_intact(root, topic)
