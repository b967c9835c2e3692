"""Topic admin as compare-and-set across nodes (issue 11): several Brokers on one root create, delete, grow
and alter one topic at once; each call applies on the latest catalog state or fails with a typed error."""

from __future__ import annotations

import json
import threading

import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.errors import InvalidPartitions, TopicAlreadyExists, UnknownTopicOrPartition
from lakelog.platform.storage import Storage
from lakelog.platform.log import TopicLog
from log_check import assert_topic_intact
from together import run_together

# Runs the admin calls given as JSON ([op, args...] each) once "go" arrives; prints each outcome:
# "ok", a LakelogError's code and message ("CODE: message"), or "UNEXPECTED ..." for anything else.
NODE = """
import json, sys
from lakelog.platform import Broker
from lakelog.platform.errors import LakelogError
from lakelog.settings import Settings
root, storage, calls = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
broker = Broker(Settings(root=root, storage=storage))
print("ready", flush=True)
sys.stdin.readline()
outcomes = []
for op, *args in calls:
    try:
        if op == "create":
            broker.create_topic("x", *args)
        elif op == "delete":
            broker.delete_topic("x")
        elif op == "alter":
            broker.alter_topic_config("x", args[0])
        else:
            broker.add_partitions("x", broker.catalog.get("x").partitions + 1)
        outcomes.append("ok")
    except LakelogError as exc:
        outcomes.append(f"{exc.code}: {exc}")
    except Exception as exc:
        outcomes.append(f"UNEXPECTED {exc!r}")
print(json.dumps(outcomes), flush=True)
broker.close()
"""


def _nodes(root: str, storage: dict, calls: list[list[list]]) -> list[list[str]]:
    """One process per list of calls, all started at once; their outcomes (with each error's message)."""
    return run_together(NODE, [[root, json.dumps(storage), json.dumps(node)] for node in calls], 300)


def _codes(outcomes: list[list[str]]) -> list[list[str]]:
    return [[o.split(":", 1)[0] for o in node] for node in outcomes]


def _usable(broker: Broker, root: str, storage: dict) -> None:
    """If the topic exists, its table is there and takes records on every partition."""
    broker.catalog.refresh()
    if "x" in {t.name for t in broker.list_topics()}:
        n = broker.topic("x").partitions
        broker.produce("x", [Record(b"v", partition=p) for p in range(n)])
        assert_topic_intact(root, "x", storage)


@pytest.mark.slow
def test_concurrent_deletes_on_two_nodes_one_wins(make_broker) -> None:
    broker = make_broker()
    broker.create_topic("x", 2)
    broker.produce("x", [Record(b"v", partition=p) for p in range(2)])
    outcomes = _nodes(make_broker.root, make_broker.storage, [[["delete"]], [["delete"]]])
    assert sorted(o[0] for o in _codes(outcomes)) == ["UNKNOWN_TOPIC_OR_PARTITION", "ok"], outcomes
    assert not broker.storage.list_names(broker.storage.uri("topics", "x"))
    assert broker.create_topic("x", 1).partitions == 1  # the name is free again
    # A node that has the old topic open must not write to the new one (the broker's open topics are the
    # cluster work's): a fresh node checks it.
    _usable(make_broker(), make_broker.root, make_broker.storage)


@pytest.mark.slow
def test_concurrent_config_changes_on_two_nodes_lose_no_update(make_broker) -> None:
    broker = make_broker()
    broker.create_topic("x", 1)
    outcomes = _nodes(make_broker.root, make_broker.storage, [
        [["alter", {"retention.ms": 1000 + i}] for i in range(5)],
        [["alter", {"max.message.bytes": 2000 + i}] for i in range(5)],
    ])
    assert _codes(outcomes) == [["ok"] * 5, ["ok"] * 5], outcomes
    broker.catalog.refresh()
    config = broker.catalog.get("x").config.to_kafka()
    assert (int(config["retention.ms"]), int(config["max.message.bytes"])) == (1004, 2004)
    _usable(make_broker(), make_broker.root, make_broker.storage)


@pytest.mark.slow
def test_every_admin_call_racing_on_three_nodes_applies_or_fails_typed(make_broker) -> None:
    ops = [["create", 1], ["delete"], ["alter", {"retention.ms": 5000}], ["grow"]]
    calls = [[ops[(i * (node + 1) + node) % len(ops)] for i in range(16)] for node in range(3)]
    outcomes = _nodes(make_broker.root, make_broker.storage, calls)
    expected = {"ok", "TOPIC_ALREADY_EXISTS", "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_PARTITIONS"}
    unexpected = [o for node in outcomes for o in node if o.split(":", 1)[0] not in expected]
    assert not unexpected, outcomes
    _usable(make_broker(), make_broker.root, make_broker.storage)


def test_a_node_with_a_stale_catalog_view_applies_changes_on_the_latest_state(make_broker) -> None:
    a, b = make_broker(), make_broker()
    a.create_topic("x", 1)
    assert b.topic("x").partitions == 1  # B's view
    a.delete_topic("x")
    a.create_topic("x", 3)
    with pytest.raises(InvalidPartitions, match="has 3 partitions"):  # not the 1 B saw
        b.add_partitions("x", 2)
    assert b.add_partitions("x", 4).partitions == 4
    a.delete_topic("x")
    with pytest.raises(UnknownTopicOrPartition):
        b.alter_topic_config("x", {"retention.ms": 1})
    with pytest.raises(UnknownTopicOrPartition):
        b.delete_topic("x")


def test_a_create_during_a_delete_never_takes_the_table_the_delete_is_removing(make_broker, monkeypatch) -> None:
    a, b = make_broker(), make_broker()
    a.create_topic("x", 1)  # a bare table (no records): what a create of the name could otherwise reuse
    b.catalog.refresh()
    removing, resume = threading.Event(), threading.Event()
    deleter = threading.Thread(target=a.delete_topic, args=("x",))

    def paused(remove):  # the delete stops between its catalog commit and the removal of the table
        def removal(self, *args):
            if threading.current_thread() is deleter:
                removing.set()
                assert resume.wait(600)
            return remove(self, *args)
        return removal

    for method in ("delete_tree", "delete_files"):  # local / S3
        monkeypatch.setattr(Storage, method, paused(getattr(Storage, method)))
    deleter.start()
    try:
        assert removing.wait(600)
        with pytest.raises(TopicAlreadyExists, match="marked for deletion"):  # as Kafka answers
            b.create_topic("x", 2)
    finally:
        resume.set()
        deleter.join()
    assert b.create_topic("x", 2).partitions == 2
    _usable(make_broker(), make_broker.root, make_broker.storage)


def test_deleting_a_missing_topic_leaves_a_bare_table_a_create_may_be_reusing(local_broker: Broker) -> None:
    # Another node's create made the table and has not committed its catalog row yet.
    TopicLog.create_table(local_broker.storage, "x")
    with pytest.raises(UnknownTopicOrPartition):
        local_broker.delete_topic("x")
    assert TopicLog.table_is_empty(local_broker.storage, "x")
    assert local_broker.create_topic("x", 1).partitions == 1
    assert local_broker.produce("x", [Record(b"a")]).offsets.tolist() == [0]
    assert_topic_intact(local_broker.settings.root, "x")
