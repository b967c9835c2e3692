"""KafkaJS (npm, pinned in tests/kafka/js/package-lock.json; it shares no code with lakelog or with its
Python dependencies) on lakelog's Kafka listener, driven by the small node scripts in tests/kafka/js/ and
checked over lakelog's HTTP API: produce with each codec KafkaJS has (which the `WireTap` sees on the wire)
to the partitions lakelog's own HTTP produce picks for the same keys, at the offsets KafkaJS was told; a
consumer group of two members (the second joins, the partitions are split, both commit; one leaves, the
other takes everything over).
"""

from __future__ import annotations

import pytest

from tests.http import conftest as http_fixtures
from tests.kafka import independent_clients
from tests.kafka.independent_clients import (
    Member,
    Served,
    all_records,
    check_group_run,
    create_topic,
    js_member,
    kafkajs,
    lakelog_partitions,
    produce_http,
    records_of,
    wait_committed_to_end,
    wait_for,
    wait_owned,
)
from tests.log_check import assert_topic_intact

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback
node = independent_clients.node
served = independent_clients.served
members = independent_clients.members


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy"])  # snappy: the kafkajs-snappy plugin
def test_kafkajs_produces_with_each_codec(node: str, served: Served, codec: str) -> None:
    topic, partitions = f"kafkajs-{codec}", 3
    create_topic(served.http, topic, partitions)
    keys = [f"user-{i}" for i in range(20)]
    batches = [[{"key": k, "value": f"{k}-{n}", "headers": {"source": "kafkajs"}} for k in keys] for n in range(3)]
    sent = kafkajs(node, "produce.js", served, topic=topic, codec=codec, batches=batches)["sent"]

    assert {c for c, _ in served.tap.produced()} == {codec}, served.tap.produced()
    assert sum(n for _, n in served.tap.produced()) == 60
    where = lakelog_partitions(served.http, keys, partitions)
    stored = all_records(served.http, topic)
    assert len(stored) == 60
    by_offset = {(r["partition"], r["offset"]): r for r in stored}
    for messages, answer in zip(batches, sent):  # each send's base offsets, as KafkaJS was told
        for partition, base in {(m["partition"], m["baseOffset"]) for m in answer}:
            mine = [m for m in messages if where[m["key"]] == partition]
            for i, message in enumerate(mine):
                record = by_offset[(partition, base + i)]
                assert (record["key"], record["value"]) == (message["key"], message["value"])
                assert record["headers"] == [{"key": "source", "value": "kafkajs"}]
    assert_topic_intact(served.root, topic)


def test_kafkajs_group_two_members_rebalance_and_commits(node: str, served: Served, members: list[Member]) -> None:
    topic, group, partitions = "kafkajs-grouped", "kafkajs-readers", 4
    http = served.http
    create_topic(http, topic, partitions)
    phase_1 = set(produce_http(http, topic, [{"key": f"a{i}", "value": "x"} for i in range(40)]))

    a = js_member(node, served, topic, group, "kafkajs-a")
    members.append(a)
    owners_1 = wait_owned(http, group, topic, {"kafkajs-a": 4}, partitions)
    wait_committed_to_end(http, group, topic)

    b = js_member(node, served, topic, group, "kafkajs-b")  # joins: a rebalance splits the partitions
    members.append(b)
    owners_2 = wait_owned(http, group, topic, {"kafkajs-a": 2, "kafkajs-b": 2}, partitions)
    phase_2 = set(produce_http(http, topic, [{"key": f"b{i}", "value": "y"} for i in range(40)]))
    wait_committed_to_end(http, group, topic)

    a.stop()  # disconnect: commits and leaves; b takes everything over
    owners_3 = wait_owned(http, group, topic, {"kafkajs-b": 4}, partitions)
    phase_3 = set(produce_http(http, topic, [{"key": f"c{i}", "value": "z"} for i in range(12)]))
    wait_committed_to_end(http, group, topic)
    b.stop()

    for member in (a, b):
        events = member.events()
        assert not [e for e in events if e["event"] in ("crash", "error")], (member.name, member.stderr())
        assert events[-1]["event"] == "stopped", (member.name, events[-3:], member.stderr())
        assert any(e["event"] == "commit" for e in events)
    joins = lambda m: [e["assignment"] for e in m.events() if e["event"] == "join"]  # noqa: E731
    assert joins(a)[0] == [0, 1, 2, 3] and joins(a)[-1] == owners_2["kafkajs-a"]  # what the member itself saw
    assert joins(b)[0] == owners_2["kafkajs-b"] and joins(b)[-1] == [0, 1, 2, 3]
    consumed = {"kafkajs-a": records_of(a.events()), "kafkajs-b": records_of(b.events())}
    check_group_run(http, group, topic, consumed,
                    [(owners_1, phase_1), (owners_2, phase_2), (owners_3, phase_3)])
    assert wait_for("the group empty", lambda: http.get(f"/v1/groups/{group}").json()["state"] == "Empty")
    assert_topic_intact(served.root, topic)
