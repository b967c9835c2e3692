"""Kafka clients on a two-node cluster: Metadata names both nodes and each topic's leader (lakelog's own
leadership), FindCoordinator the group's coordinator; a client bootstrapped at one node produces to and
consumes from both, in a group, and the group's offsets show over HTTP on either node."""

from __future__ import annotations

from pathlib import Path

import httpx
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient

from tests.cluster.cluster_nodes import two_nodes_leading, wait_until
from tests.patience import STUCK_S
from tests.log_check import assert_topic_intact


def test_metadata_leaders_and_a_group_across_two_nodes(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    with two_nodes_leading(root, {f"t{i}": 2 for i in range(8)}) as (nodes, leaders):
        port_of = {node.name: int(node.bootstrap.rsplit(":", 1)[1]) for node in nodes}
        assert set(leaders.values()) == {"n1", "n2"}  # rendezvous spreads 8 topics over both

        admin = KafkaAdminClient(bootstrap_servers=nodes[0].bootstrap)
        try:
            brokers = {b["broker_id"]: b["port"] for b in admin.describe_cluster()["brokers"]}
            assert sorted(brokers.values()) == sorted(port_of.values())
            for topic in admin.describe_topics([f"t{i}" for i in range(8)]):
                assert {brokers[p["leader_id"]] for p in topic["partitions"]} == {port_of[leaders[topic["name"]]]}
        finally:
            admin.close()

        producer = KafkaProducer(bootstrap_servers=nodes[0].bootstrap, acks="all", enable_idempotence=True)
        sent = [producer.send(f"t{i % 8}", key=b"k%d" % i, value=b"v%d" % i) for i in range(80)]
        producer.flush(30)
        assert all(f.get(10).offset >= 0 for f in sent)
        producer.close()

        consumer = KafkaConsumer(*[f"t{i}" for i in range(8)], bootstrap_servers=nodes[1].bootstrap,
                                 group_id="readers", auto_offset_reset="earliest", enable_auto_commit=False)
        got = []
        wait_until(lambda: got.extend(r for rs in consumer.poll(500).values() for r in rs) or len(got) >= 80, STUCK_S,
                   lambda: f"{len(got)} of 80 records")
        consumer.commit()
        consumer.close()
        assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(80))
        for node in nodes:  # answered by the coordinator, relayed by the other
            offsets = httpx.get(node.url + "/v1/groups/readers", timeout=STUCK_S).json()["offsets"]
            assert sum(o["offset"] for o in offsets) == 80
        for i in range(8):
            assert_topic_intact(root, f"t{i}")
