"""Nodes of a test cluster: `lakelog serve` processes on one root, and what the tests wait for."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

import httpx

from tests.http.conftest import ProcessServer, free_port
from tests.patience import STUCK_S

T = TypeVar("T")

HEARTBEAT_MS, SESSION_MS = 300, 2500
CLUSTER_ENV = {"LAKELOG_BROKER_HEARTBEAT_INTERVAL_MS": str(HEARTBEAT_MS),
               "LAKELOG_BROKER_SESSION_TIMEOUT_MS": str(SESSION_MS), "LAKELOG_JOBS_INTERVAL_S": "0"}


class Node(ProcessServer):
    def __init__(self, root: str, name: str, env: dict[str, str]) -> None:
        super().__init__(root, {**CLUSTER_ENV, **env, "LAKELOG_NODE_ID": name}, free_port())
        self.name = name

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)


def wait_until(predicate: Any, timeout_s: float, what: str | Any) -> None:
    wait_for(predicate, what, timeout_s)


def wait_for(observe: Callable[[], T | None], what: str | Callable[[], str], timeout_s: float = STUCK_S) -> T:
    """The first observation that is neither None nor false. The caller asserts on that observation, not on
    a second look: between two looks the cluster may move on."""
    deadline = time.monotonic() + timeout_s
    while not (seen := observe()):
        assert time.monotonic() < deadline, f"timed out waiting for {what if isinstance(what, str) else what()}"
        time.sleep(0.1)
    return seen


def views(nodes: list[Node]) -> list[Any]:
    """What each node says of the cluster (for failure messages)."""
    found = []
    for node in nodes:
        try:
            view = httpx.get(node.url + "/v1/cluster", timeout=5).json()
            found.append((node.name, [n["node_id"] for n in view["nodes"]]))
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            found.append((node.name, repr(exc)))
    return found


def settled(nodes: list[Node]) -> dict[str, Any] | None:
    """The cluster as every live node sees it, when they all agree; else None."""
    views = []
    for node in nodes:
        try:
            response = httpx.get(node.url + "/v1/cluster", timeout=5)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:  # a node renewing its membership answers 503 meanwhile
            return None
        views.append(response.json())
    names = {n.name for n in nodes}
    shapes = {(tuple(sorted(n["node_id"] for n in v["nodes"])), tuple(sorted(v["topics"].items()))) for v in views}
    if len(shapes) != 1 or set(next(iter(shapes))[0]) != names:
        return None
    return views[0]


@contextmanager
def two_nodes_leading(root: str, topics: dict[str, int],
                      env: dict[str, str] | None = None) -> Iterator[tuple[list[Node], dict[str, str]]]:
    """Nodes n1 and n2 on `root` (`env`: their environment's additions), agreed, with `topics` (name ->
    partitions) created through n1: the nodes and each topic's leader, once both nodes name the same
    leaders. Both nodes are stopped at the end."""
    nodes = [Node(root, name, dict(env or {})) for name in ("n1", "n2")]
    try:
        for node in nodes:
            node.start()
        wait_until(lambda: settled(nodes) is not None, STUCK_S, lambda: views(nodes))
        for topic, partitions in topics.items():
            httpx.post(nodes[0].url + "/v1/topics", json={"name": topic, "partitions": partitions},
                       timeout=STUCK_S).raise_for_status()

        def all_led() -> dict[str, Any] | None:
            cluster = settled(nodes)
            return cluster if cluster is not None and len(cluster["topics"]) == len(topics) else None

        cluster = wait_for(all_led, lambda: f"both nodes to lead the {len(topics)} topics: {views(nodes)}")
        yield nodes, cluster["topics"]
    finally:
        for node in nodes:
            node.terminate()
