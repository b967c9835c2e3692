"""Topic admin is compare-and-set, within a node and across processes sharing a root (hardening, item 2)."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.errors import InvalidPartitions, LakelogError, TopicAlreadyExists, UnknownTopicOrPartition
from lakelog.platform.log import TopicLog
from lakelog.settings import Settings
from log_check import assert_topic_intact
from together import run_together
from tests.patience import STUCK_S

# A process that waits for "go" on stdin, runs one admin call, and prints its outcome as JSON.
ADMIN_PROCESS = """
import json, sys
from lakelog.platform import Broker
from lakelog.platform.errors import LakelogError
from lakelog.settings import Settings
root, storage, call, name, n = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
broker = Broker(Settings(root=root, storage=storage))
print("ready", flush=True)
sys.stdin.readline()
try:
    if call == "create":
        meta = broker.create_topic(name, n)
    else:
        meta = broker.add_partitions(name, n)
    print(json.dumps({"ok": meta.partitions}), flush=True)
except LakelogError as exc:
    print(json.dumps({"error": exc.code}), flush=True)
broker.close()
"""


def _run_together(root: str, storage: dict, calls: list[tuple[str, str, int]]) -> list[dict]:
    return run_together(ADMIN_PROCESS, [[root, json.dumps(storage), *map(str, call)] for call in calls], 120)


@pytest.mark.slow
def test_concurrent_creates_in_three_processes_one_wins(make_broker) -> None:
    outcomes = _run_together(make_broker.root, make_broker.storage, [("create", "shared", n) for n in (1, 2, 3)])
    winners = [o for o in outcomes if "ok" in o]
    assert len(winners) == 1, outcomes
    assert sorted(o.get("error", "") for o in outcomes) == ["", "TOPIC_ALREADY_EXISTS", "TOPIC_ALREADY_EXISTS"]
    broker = make_broker()
    assert broker.topic("shared").partitions == winners[0]["ok"]
    broker.produce("shared", [Record(b"x", partition=0)])
    assert_topic_intact(make_broker.root, "shared", make_broker.storage)


@pytest.mark.slow
def test_concurrent_partition_increases_in_two_processes_never_decrease(make_broker) -> None:
    make_broker().create_topic("grow", 1)
    outcomes = _run_together(make_broker.root, make_broker.storage, [("grow", "grow", 8), ("grow", "grow", 4)])
    assert outcomes[0] == {"ok": 8}, outcomes
    assert outcomes[1] in ({"ok": 4}, {"error": "INVALID_PARTITIONS"})
    assert make_broker().topic("grow").partitions == 8


def test_concurrent_creates_on_one_node_one_wins(local_broker: Broker) -> None:
    barrier = threading.Barrier(8)

    def create(partitions: int) -> int | str:
        barrier.wait()
        try:
            return local_broker.create_topic("same", partitions).partitions
        except LakelogError as exc:
            return exc.code

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(create, range(1, 9)))
    assert sorted(map(str, outcomes)).count("TOPIC_ALREADY_EXISTS") == 7, outcomes
    winner = next(o for o in outcomes if isinstance(o, int))
    assert local_broker.topic("same").partitions == winner
    local_broker.produce("same", [Record(b"x", partition=p) for p in range(winner)])
    assert sorted(assert_topic_intact(local_broker.settings.root, "same")) == list(range(winner))


def test_partition_counts_never_decrease_on_one_node(local_broker: Broker) -> None:
    local_broker.create_topic("grow", 1)
    barrier = threading.Barrier(2)

    def grow(total: int) -> int | str:
        barrier.wait()
        try:
            return local_broker.add_partitions("grow", total).partitions
        except InvalidPartitions as exc:
            return exc.code

    for _ in range(5):
        before = local_broker.topic("grow").partitions
        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(grow, [before + 7, before + 3]))
        barrier.reset()
        # +3 then +7 both succeed; +7 then +3 refuses the smaller count: either way the larger one stands.
        assert outcomes[0] == before + 7 and outcomes[1] in (before + 3, "INVALID_PARTITIONS")
        assert local_broker.topic("grow").partitions == before + 7
    total = local_broker.topic("grow").partitions
    local_broker.produce("grow", [Record(b"x", partition=p) for p in range(total)])
    assert sorted(assert_topic_intact(local_broker.settings.root, "grow")) == list(range(total))


def test_two_changes_answered_out_of_order_leave_the_later_count(local_broker: Broker) -> None:
    """The catalog commits +3 first and +7 second, but the +3 caller is slower to hand its answer to the
    broker (a loaded machine's scheduling, as in a fresh-clone run): the topic must not shrink back."""
    local_broker.create_topic("grow", 1)
    assert local_broker.topic("grow").partitions == 1  # opened: the broker holds its meta from here
    add = local_broker.catalog.add_partitions
    later_answered = threading.Event()

    def slow_first(name: str, total: int):
        meta = add(name, total)
        if total == 4:
            later_answered.wait(STUCK_S)
        return meta

    local_broker.catalog.add_partitions = slow_first  # type: ignore[method-assign]
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(local_broker.add_partitions, "grow", 4)
        deadline = time.monotonic() + STUCK_S
        while local_broker.catalog.get("grow").partitions != 4:  # +3 committed, its answer held back
            assert time.monotonic() < deadline and not first.done(), "the first change did not commit"
            time.sleep(0.01)
        assert local_broker.add_partitions("grow", 8).partitions == 8
        later_answered.set()
        assert first.result(STUCK_S).partitions == 4
    assert local_broker.topic("grow").partitions == 8


def test_creating_a_topic_never_deletes_an_existing_table(local_broker: Broker) -> None:
    """A table holding data at the topic's path (a delete cut short) is refused, not wiped."""
    local_broker.create_topic("t", 1)
    local_broker.produce("t", [Record(b"precious")])
    # The catalog forgets the topic but the table stays: as after a crash between the two steps of a delete.
    local_broker.catalog._change("t", lambda current, now: None)
    with pytest.raises(UnknownTopicOrPartition):
        local_broker.catalog.get("t")
    with pytest.raises(TopicAlreadyExists, match="marked for deletion"):
        local_broker.create_topic("t", 1)
    log = TopicLog(local_broker.storage, "t")
    assert log.read(0, 0, 10).column("value").to_pylist() == [b"precious"]
    local_broker.delete_topic("t")  # finishes the interrupted delete
    assert local_broker.create_topic("t", 1).partitions == 1
    assert local_broker.produce("t", [Record(b"new")]).offsets.tolist() == [0]


def test_an_empty_table_left_by_another_creator_is_reused(local_broker: Broker) -> None:
    TopicLog.create_table(local_broker.storage, "t")  # another node's create, before its catalog commit
    assert local_broker.create_topic("t", 2).partitions == 2
    assert local_broker.produce("t", [Record(b"a", partition=1)]).offsets.tolist() == [0]


@pytest.mark.slow
def test_eight_nodes_changing_one_topic_at_once_all_apply(tmp_path) -> None:
    """A node that loses the compare-and-set tries again after a jittered wait: without it, under this much
    contention some node lost every one of its attempts and answered INVALID_REQUEST."""
    root = str(tmp_path / "data")
    nodes = [Broker(Settings(root=root)) for _ in range(8)]
    nodes[0].create_topic("x", 1)
    barrier = threading.Barrier(len(nodes))

    def alter_ten_times(node: int) -> list[str]:
        barrier.wait()
        outcomes = []
        for change in range(10):
            try:
                nodes[node].alter_topic_config("x", {"retention.ms": 1000 + node * 100 + change})
                outcomes.append("ok")
            except LakelogError as exc:
                outcomes.append(exc.code)
        return outcomes

    try:
        with ThreadPoolExecutor(len(nodes)) as pool:
            outcomes = list(pool.map(alter_ten_times, range(len(nodes))))
        assert outcomes == [["ok"] * 10] * len(nodes)
        final = Broker(Settings(root=root))
        # The last change to commit is some node's tenth.
        assert final.topic("x").config.retention_ms in {1000 + node * 100 + 9 for node in range(len(nodes))}
        final.close()
    finally:
        for node in nodes:
            node.close()
