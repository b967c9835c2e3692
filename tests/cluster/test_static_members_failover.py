"""Static members (`group.instance.id`) keep their assignment when the group's coordinator node dies:
three nodes, three static consumers spread over them; SIGKILL the coordinator; the group comes back on a
survivor with each instance owning the partitions it owned before, and no committed offset went back."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from lakelog.client import Consumer
from tests.cluster.cluster_nodes import Node, settled, wait_for, wait_until
from tests.patience import STUCK_S

pytestmark = pytest.mark.slow
GROUP, TOPIC = "statics", "events"
CONFIG = {"group.id": GROUP, "session.timeout.ms": 8000, "heartbeat.interval.ms": 300, "fetch.wait.max.ms": 300,
          "request.timeout.ms": 3000, "default.api.timeout.ms": 60_000, "auto.offset.reset": "earliest"}


def described(node: Node) -> dict[str, Any] | None:
    try:
        response = httpx.get(f"{node.url}/v1/groups/{GROUP}", timeout=5)
    except httpx.HTTPError:
        return None
    return response.json() if response.status_code == 200 else None


def coordinator_of(nodes: list[Node]) -> str | None:
    """The node id coordinating the group, as the node that holds it says."""
    for node in nodes:
        try:
            groups = httpx.get(node.url + "/v1/cluster", timeout=5).json()["groups"]
        except (httpx.HTTPError, ValueError):
            continue
        if GROUP in groups:
            return groups[GROUP]
    return None


def assignment_by_instance(node: Node) -> dict[str, list[int]] | None:
    """Instance id -> partitions, once the group is stable with its three members and all partitions."""
    group = described(node)
    if group is None or group["state"] != "Stable" or len(group["members"]) != 3:
        return None
    owned = {m["group_instance_id"]: sorted(a["partition"] for a in m["assignment"]) for m in group["members"]}
    return owned if sorted(p for ps in owned.values() for p in ps) == list(range(6)) else None


def test_static_members_keep_their_assignment_when_the_coordinator_dies(tmp_path) -> None:
    root = str(tmp_path / "root")
    nodes = [Node(root, f"n{i}", {}) for i in range(3)]
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        for node in nodes:
            node.start()
        wait_until(lambda: settled(nodes) is not None, STUCK_S, "three nodes")
        assert httpx.post(nodes[0].url + "/v1/topics", json={"name": TOPIC, "partitions": 6}, timeout=STUCK_S).status_code == 201
        urls = [n.url for n in nodes]

        def run(i: int) -> None:
            consumer = Consumer(",".join(urls[i:] + urls[:i]), {**CONFIG, "group.instance.id": f"instance-{i}"})
            consumer.subscribe([TOPIC])
            while not stop.is_set():
                consumer.consume(100, 0.3)
            consumer.close()

        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(3)]
        for thread in threads:
            thread.start()
        wait_until(lambda: assignment_by_instance(nodes[0]) is not None, STUCK_S, "a stable group of three")
        before = assignment_by_instance(nodes[0])

        coordinator = next(n for n in nodes if n.name == coordinator_of(nodes))
        survivors = [n for n in nodes if n is not coordinator]
        coordinator.kill()
        after = wait_for(lambda: settled(survivors) and assignment_by_instance(survivors[0]),
                         lambda: f"the group on a survivor: {described(survivors[0])}")
        assert after == before
        assert coordinator_of(survivors) in {n.name for n in survivors}
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        for node in nodes:
            node.terminate()
