"""A share group on a two-node cluster, with confluent-kafka's unmodified ShareConsumer: the topic's leader is
one node and the group's coordinator the other. The client sends ShareFetch and ShareAcknowledge to the
leader, as Metadata names it; the leader passes them on to the coordinator, which holds the group's records
(kafka_api/relay.py). Two consumers, one bootstrapped at each node, share the records: every record accepted
exactly once, and the topic scanned at the end."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from confluent_kafka import ShareConsumer

from lakelog.platform.cluster.ownership import group_key, owner
from tests.cluster.cluster_nodes import two_nodes_leading
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

TOPIC, COUNT = "jobs", 200
ACCEPT = 1


def group_coordinated_by(node: str) -> str:
    """A group name whose coordinator (rendezvous over n1 and n2) is `node`."""
    return next(g for g in (f"workers-{i}" for i in range(1000)) if owner(group_key(g), ["n1", "n2"]) == node)


def test_share_consumers_through_the_leader_are_served_by_the_coordinator(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    with two_nodes_leading(root, {TOPIC: 1}) as (nodes, leaders):
        by_name = {node.name: node for node in nodes}
        coordinator = "n2" if leaders[TOPIC] == "n1" else "n1"
        group = group_coordinated_by(coordinator)
        leader = by_name[leaders[TOPIC]]
        configured = httpx.put(f"{leader.url}/v1/share-groups/{group}/config",  # relayed to the coordinator
                               json={"config": {"share.auto.offset.reset": "earliest"}}, timeout=STUCK_S)
        assert configured.status_code == 200, configured.text
        produced = httpx.post(f"{leader.url}/v1/topics/{TOPIC}/records",
                              json={"records": [{"value": f"job-{i}"} for i in range(COUNT)]}, timeout=STUCK_S)
        assert produced.status_code == 200, produced.text

        consumers = [ShareConsumer({"bootstrap.servers": node.bootstrap, "group.id": group,
                                    "share.acknowledgement.mode": "explicit"}) for node in nodes]
        accepted: list[int] = []
        per_consumer = [0, 0]
        try:
            for consumer in consumers:
                consumer.subscribe([TOPIC])
            deadline = time.monotonic() + STUCK_S
            while len(accepted) < COUNT:
                assert time.monotonic() < deadline, f"stuck at {len(accepted)} of {COUNT} accepted"
                for index, consumer in enumerate(consumers):
                    messages = [m for m in consumer.poll(0.2) if m.error() is None]
                    for message in messages:
                        consumer.acknowledge(message, ACCEPT)
                        accepted.append(message.offset())
                    per_consumer[index] += len(messages)
                    if messages:
                        assert all(e is None for e in consumer.commit_sync().values())
        finally:
            for consumer in consumers:
                consumer.close()
        assert sorted(accepted) == list(range(COUNT)), "every record accepted exactly once"
        described = httpx.get(f"{by_name[coordinator].url}/v1/share-groups/{group}", timeout=STUCK_S).json()
        assert [p["start_offset"] for p in described["partitions"]] == [COUNT]
        assert_topic_intact(root, TOPIC)
