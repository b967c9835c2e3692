"""KIP-848 consumer groups (`group.protocol=consumer`) survive the loss of their coordinator node: two nodes,
two unmodified confluent-kafka consumers reading a topic and committing every record synchronously; the node
coordinating the group is SIGKILLed; the group goes on on the survivor. Its members go on there with their
member ids and epochs (the survivor restores them from `_control/consumer_groups`: they do not join again),
every record produced before and after the kill is read, the committed offsets read back from
`_control/consumer_offsets` are kept, and no record from before them is read again. Then the topic's log is scanned."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, KafkaException

from lakelog.kafka_api.messages import ConsumerGroupDescribeRequest
from lakelog.platform.groups.consumer_store import ConsumerGroupStore
from lakelog.platform.storage import Storage
from tests.cluster.cluster_nodes import Node, settled, views, wait_for, wait_until
from tests.kafka.raw_calls import call
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

pytestmark = pytest.mark.slow
GROUP, TOPIC, PARTITIONS = "kip848-failover", "moving", 4
BEFORE, AFTER = 120, 120  # records produced before the kill, and after it
ENV = {"LAKELOG_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "300", "LAKELOG_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "10000"}


def produce(nodes: list[Node], start: int, count: int) -> None:
    """Records `start`.. round-robin over the partitions, through whichever node answers (a topic whose
    leader was killed is refused until its journal is taken over: asked again)."""
    records = [{"key": f"k{i}", "value": str(i), "partition": i % PARTITIONS} for i in range(start, start + count)]
    deadline = time.monotonic() + STUCK_S
    while True:
        for node in nodes:
            try:
                response = httpx.post(f"{node.url}/v1/topics/{TOPIC}/records", json={"records": records}, timeout=10)
            except httpx.HTTPError:
                continue
            if response.status_code == 200:
                return
        assert time.monotonic() < deadline, f"records {start}.. never produced: {views(nodes)}"
        time.sleep(0.2)


def coordinator_of(nodes: list[Node]) -> str | None:
    """The node holding the group, as the nodes say (`/v1/cluster`'s groups are each node's own)."""
    for node in nodes:
        try:
            groups = httpx.get(node.url + "/v1/cluster", timeout=5).json()["groups"]
        except (httpx.HTTPError, ValueError, KeyError):
            continue
        if GROUP in groups:
            return str(groups[GROUP])
    return None


def committed(node: Node) -> dict[int, int] | None:
    try:
        response = httpx.get(f"{node.url}/v1/groups/{GROUP}/offsets", timeout=10)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return {o["partition"]: o["offset"] for o in response.json()["offsets"] if o["topic"] == TOPIC}


def stable_pair(node: Node) -> list[list[int]] | None:
    """Each member's partitions, once the group is a stable consumer group of two owning all partitions."""
    try:
        response = httpx.get(f"{node.url}/v1/groups/{GROUP}", timeout=5)
    except httpx.HTTPError:
        return None
    group = response.json() if response.status_code == 200 else None
    if group is None or group["type"] != "consumer" or group["state"] != "Stable" or len(group["members"]) != 2:
        return None
    owned = [sorted(a["partition"] for a in m["assignment"]) for m in group["members"]]
    return owned if all(owned) and sorted(p for ps in owned for p in ps) == list(range(PARTITIONS)) else None


def described(node: Node) -> dict[str, int] | None:
    try:
        return described_members(node)
    except (AssertionError, OSError):
        return None


def generation(node: Node) -> int:
    return int(httpx.get(f"{node.url}/v1/groups/{GROUP}", timeout=10).json()["generation"])


def described_members(node: Node) -> dict[str, int]:
    """Member id -> member epoch, as ConsumerGroupDescribe on `node` answers."""
    (group,) = call(node.bootstrap, ConsumerGroupDescribeRequest(group_ids=[GROUP],
                                                                 include_authorized_operations=False), 1).groups
    assert group.error_code == 0, group
    return {m.member_id: m.member_epoch for m in group.members}


class Reader:
    """A confluent-kafka consumer on a thread: every record read is noted, then committed synchronously."""

    def __init__(self, name: str, bootstrap: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                                  "client.id": name, "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.consumer.subscribe([TOPIC])
        self.read: list[tuple[int, int, int]] = []  # (partition, offset, value)
        self.failed_commits: list[tuple[int, int]] = []  # (partition, offset) whose commit was refused
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            message = self.consumer.poll(0.1)
            if message is None:
                continue
            if message.error() is not None:
                self.errors.append(str(message.error()))
                continue
            self.read.append((message.partition(), message.offset(), int(message.value())))
            try:
                self.consumer.commit(message=message, asynchronous=False)
            except KafkaException:
                self.failed_commits.append((message.partition(), message.offset()))
        self.consumer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(STUCK_S)


def test_a_consumer_group_goes_on_when_its_coordinator_node_is_killed(tmp_path: Any) -> None:
    root = str(tmp_path / "root")
    nodes = [Node(root, name, ENV) for name in ("n1", "n2")]
    readers: list[Reader] = []
    try:
        for node in nodes:
            node.start()
        wait_until(lambda: settled(nodes) is not None, STUCK_S, lambda: views(nodes))
        created = httpx.post(nodes[0].url + "/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS},
                             timeout=STUCK_S)
        assert created.status_code == 201, created.text
        bootstrap = ",".join(n.bootstrap for n in nodes)
        readers = [Reader(f"reader-{i}", bootstrap) for i in range(2)]
        wait_for(lambda: any(stable_pair(n) for n in nodes), lambda: f"a stable group of two: {views(nodes)}")

        produce(nodes, 0, BEFORE)
        per_partition = BEFORE // PARTITIONS
        wait_for(lambda: committed(nodes[0]) == {p: per_partition for p in range(PARTITIONS)},
                 lambda: f"the first {BEFORE} records committed: {committed(nodes[0])}")
        before = [r for reader in readers for r in reader.read]
        assert sorted(v for _, _, v in before) == list(range(BEFORE))  # each once
        assert not any(reader.failed_commits for reader in readers)

        # A third member joins and leaves: the group's generation moves past what a group started over would
        # reach, which tells the survivor's restored group from one its members joined again.
        third = Reader("reader-2", bootstrap)
        wait_for(lambda: any(len(described(n) or {}) == 3 for n in nodes), "a third member")
        third.close()
        node = wait_for(lambda: next((n for n in nodes if stable_pair(n)), None), "back to two members")
        generation_before = generation(node)
        assert generation_before > 4

        name = wait_for(lambda: coordinator_of(nodes), "the group's coordinator")
        coordinator = next(n for n in nodes if n.name == name)
        survivor = next(n for n in nodes if n is not coordinator)
        read_before = [len(reader.read) for reader in readers]
        members_before = described_members(coordinator)
        assert len(members_before) == 2
        coordinator.kill()
        produce([survivor], BEFORE, AFTER)  # while the group moves

        total = BEFORE + AFTER
        wait_for(lambda: sum(len(r.read) for r in readers) >= total and
                 committed(survivor) == {p: total // PARTITIONS for p in range(PARTITIONS)},
                 lambda: f"{sum(len(r.read) for r in readers)} of {total} read, committed {committed(survivor)}, "
                         f"errors {[r.errors[-3:] for r in readers]}, survivor: {survivor.log_tail(1500)}")
        wait_for(lambda: stable_pair(survivor), lambda: f"both members back on {survivor.name}")
        assert coordinator_of([survivor]) == survivor.name

        after = [r for reader, n in zip(readers, read_before) for r in reader.read[n:]]
        assert all(offset >= per_partition for _, offset, _ in after), \
            f"read again from before the committed offsets: {sorted(r for r in after if r[1] < per_partition)}"
        values = sorted(v for _, _, v in after)
        assert set(values) == set(range(BEFORE, total))  # every record produced after the kill
        failed = [fc for reader in readers for fc in reader.failed_commits]
        again = {(p, o) for p, o, _ in after if sum(1 for q, f, _ in after if (q, f) == (p, o)) > 1}
        for p, o in again:  # read twice only past a commit that was refused (a member lost its partition)
            assert any(q == p and f <= o for q, f in failed), f"({p}, {o}) read twice with every commit answered"

        members_after = described_members(survivor)  # the same members, restored from the table, not rejoined
        assert set(members_after) == set(members_before)
        assert all(members_after[m] >= members_before[m] > 0 for m in members_before)
        assert generation(survivor) >= generation_before  # not a new group's (a member that joined again
        # would start one over at generation 1)
        store = ConsumerGroupStore(Storage.open(root))  # the state is in the control table
        state = store.load()[GROUP]
        store.close()
        assert sorted(m["id"] for m in json.loads(state)["members"]) == sorted(members_before)
    finally:
        for reader in readers:
            reader.close()
        for node in nodes:
            node.terminate()
    assert_topic_intact(root, TOPIC)
