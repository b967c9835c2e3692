"""A group id of any characters on a two-node cluster (issue 40): a confluent-kafka consumer commits in a
group whose id holds a `/`, a comma, quotes and Unicode; either node answers for the group over HTTP under
its URL-encoded id (the coordinator, and the other node relaying to it: both must name the same owner for
the id the client sent, and the relayed path keep the `/` inside the id)."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import quote

import httpx
from confluent_kafka import Consumer, TopicPartition

from tests.cluster.cluster_nodes import two_nodes_leading
from tests.patience import STUCK_S

GROUP = "team/billing, 'prod' ☃"


def test_an_odd_group_id_is_served_through_either_node(tmp_path: Path) -> None:
    with two_nodes_leading(str(tmp_path / "root"), {"orders": 1}) as (nodes, _):
        httpx.post(nodes[0].url + "/v1/topics/orders/records", json={"records": [{"value": "v"}] * 5},
                   timeout=STUCK_S).raise_for_status()
        consumer = Consumer({"bootstrap.servers": nodes[1].bootstrap, "group.id": GROUP,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            consumer.subscribe(["orders"])
            deadline, seen = time.monotonic() + STUCK_S, 0
            while seen < 5 and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None:
                    assert message.error() is None, message.error()
                    seen += 1
            answered = consumer.commit(offsets=[TopicPartition("orders", 0, 5)], asynchronous=False)
            assert [tp.error for tp in answered] == [None]
        finally:
            consumer.close()
        for node in nodes:  # answered by the coordinator, relayed by the other
            response = httpx.get(f"{node.url}/v1/groups/{quote(GROUP, safe='')}/offsets", timeout=STUCK_S)
            assert response.status_code == 200, (node.name, response.text)
            assert response.json()["group"] == GROUP
            assert [(o["topic"], o["offset"]) for o in response.json()["offsets"]] == [("orders", 5)]
