"""A topic deleted and created again under the same name (librdkafka's test 0107): no node keeps using the
former topic's table. The node that deletes drops it at once and opens nothing of the name while the delete
runs; another node drops it with its next catalog refresh (its group coordinator's, each second) and opens the
new table, whose offsets start again at 0. A deleted topic's committed offsets go with it, as in Kafka."""

from __future__ import annotations

import threading

import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.errors import UnknownTopicOrPartition
from lakelog.platform.groups import GroupCoordinator
from log_check import assert_topic_intact


def produce(broker: Broker, topic: str, count: int, partition: int = 0) -> list[int]:
    return list(broker.produce(topic, [Record(b"v%d" % i, partition=partition) for i in range(count)]).offsets)


def test_another_node_drops_the_former_table_and_writes_the_new_one_from_0(make_broker) -> None:
    a, b = make_broker(), make_broker()
    a.create_topic("t", 3)
    assert produce(a, "t", 5, partition=2) == [0, 1, 2, 3, 4]
    former = a.catalog.get("t")

    b.delete_topic("t")  # another node
    b.create_topic("t", 1)
    a.list_topics()  # a's catalog refresh: the former table is dropped here
    assert a.topic("t").partitions == 1
    assert produce(a, "t", 3) == [0, 1, 2]
    assert produce(b, "t", 2) == [3, 4]
    a.flush()
    assert assert_topic_intact(make_broker.root, "t", make_broker.storage) == {0: [0, 1, 2, 3, 4]}
    assert a.catalog.get("t").topic_id != former.topic_id  # Kafka clients tell the new topic by its id


def test_the_former_table_takes_no_commit_once_dropped(make_broker) -> None:
    a, b = make_broker(linger_ms=200), make_broker()
    a.create_topic("t", 1)
    produce(a, "t", 3)
    opened = a._open("t")
    b.delete_topic("t")
    b.create_topic("t", 1)
    waiting = a.produce_async("t", [Record(b"late")])  # queued on the former table: its flush lingers
    a.list_topics()
    with pytest.raises(UnknownTopicOrPartition):  # a producer sends it again, to the new topic
        waiting.result(timeout=30)
    assert opened.log.abandoned and a._open("t") is not opened
    assert produce(b, "t", 1) == [0]
    assert assert_topic_intact(make_broker.root, "t", make_broker.storage) == {0: [0]}


def test_nothing_reopens_the_table_while_this_node_deletes_it(make_broker) -> None:
    broker = make_broker()
    broker.create_topic("t", 2)
    stop = threading.Event()
    errors: list[BaseException] = []

    def keep_using() -> None:  # produce and read the log ends on other threads all through the deletes
        while not stop.is_set():
            try:
                broker.produce("t", [Record(b"x")])
                broker.log_end_offsets("t")
            except UnknownTopicOrPartition:
                pass
            except BaseException as exc:  # a Delta error of a table being deleted, say
                errors.append(exc)

    users = [threading.Thread(target=keep_using) for _ in range(4)]
    for user in users:
        user.start()
    try:
        for _ in range(5):
            produce(broker, "t", 20)
            broker.delete_topic("t")
            broker.create_topic("t", 2)  # refused (TOPIC_ALREADY_EXISTS) if a former table wrote on meanwhile
    finally:
        stop.set()
        for user in users:
            user.join(30)
    assert errors == []
    broker.flush()
    offsets = assert_topic_intact(make_broker.root, "t", make_broker.storage)
    assert all(o[0] == 0 for o in offsets.values())


def test_a_deleted_topics_committed_offsets_go_with_it(make_broker) -> None:
    a, b = make_broker(), make_broker()
    a.create_topic("t", 2)
    a.create_topic("kept", 1)
    here, there = GroupCoordinator(a), GroupCoordinator(b)  # coordinators of other groups on another node
    try:
        here.commit("g", None, -1, [("t", 0, 4, None), ("t", 1, 2, None), ("kept", 0, 1, None)]).result(30)
        b.list_topics()
        there.commit("h", None, -1, [("t", 1, 3, None)]).result(30)
        there.tick()  # the node has seen the topic
        a.delete_topic("t")  # this node's coordinator removes the offsets from the table and from memory
        assert here.committed("g") == {("kept", 0): here.committed("g")[("kept", 0)]}
        assert {tp for offsets in here.store.load().values() for tp in offsets} == {("kept", 0)}
        a.create_topic("t", 1)
        b.list_topics()
        there._counts_at = -1e9  # the next tick reads the catalog (each second)
        there.tick()
        assert there.committed("h") == {}  # the other node's coordinator follows the catalog
        with pytest.raises(UnknownTopicOrPartition):
            there.commit("h", None, -1, [("t", 1, 3, None)]).result(30)  # the new topic has 1 partition
        there.commit("h", None, -1, [("t", 0, 1, None)]).result(30)
        assert set(there.committed("h")) == {("t", 0)}
    finally:
        here.close()
        there.close()
