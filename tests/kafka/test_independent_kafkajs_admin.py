"""KafkaJS's admin client (npm, pinned in tests/kafka/js/package-lock.json; it shares no code with lakelog
or with its Python dependencies) on lakelog's Kafka listener, through tests/kafka/js/admin.js and checked
over lakelog's HTTP API: create topics, alter configs (the AlterConfigs API), set and reset a group's
offsets, delete records (DeleteRecords), describe groups.
"""

from __future__ import annotations

from typing import Any

from tests.http import conftest as http_fixtures
from tests.kafka import independent_clients
from tests.kafka.independent_clients import (
    Member,
    Served,
    all_records,
    committed,
    create_topic,
    end_offsets,
    fetch_all,
    js_member,
    kafkajs,
    produce_http,
    records_of,
    topic_detail,
    wait_committed_to_end,
    wait_owned,
)
from tests.log_check import assert_topic_intact

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback
node = independent_clients.node
served = independent_clients.served
members = independent_clients.members


def admin(node: str, served: Served, *calls: tuple[str, Any]) -> list[dict[str, Any]]:
    """KafkaJS admin calls in one client; each one's {ok, result} or {ok: false, error}."""
    return kafkajs(node, "admin.js", served, calls=[{"call": c, "args": a} for c, a in calls])["results"]


def ok(result: dict[str, Any]) -> Any:
    assert result["ok"], f"KafkaJS: {result['error']}"
    return result["result"]

# ---- KafkaJS admin ---------------------------------------------------------------------------------------------

TOPIC_RESOURCE = 2  # KafkaJS ConfigResourceTypes.TOPIC


def described_configs(node: str, served: Served, topic: str, names: list[str]) -> dict[str, str]:
    (result,) = admin(node, served, ("describeConfigs", {"includeSynonyms": False, "resources": [
        {"type": TOPIC_RESOURCE, "name": topic, "configNames": names}]}))
    (resource,) = ok(result)["resources"]
    assert resource["errorCode"] == 0, resource
    assert all(c["configSynonyms"] == [] for c in resource["configEntries"]), resource  # none asked for
    return {c["configName"]: c["configValue"] for c in resource["configEntries"]}


def test_kafkajs_admin_creates_topics(node: str, served: Served) -> None:
    spec = {"topic": "made-by-kafkajs", "numPartitions": 3, "configEntries": [
        {"name": "retention.ms", "value": "3600000"}, {"name": "cleanup.policy", "value": "compact"}]}
    created, again, listed, metadata = admin(
        node, served,
        ("createTopics", {"topics": [spec], "waitForLeaders": True}),
        ("createTopics", {"topics": [spec]}),  # already there: KafkaJS answers false
        ("listTopics", None),
        ("fetchTopicMetadata", {"topics": ["made-by-kafkajs"]}))
    assert ok(created) is True and ok(again) is False
    detail = topic_detail(served.http, "made-by-kafkajs")
    assert [p["partition"] for p in detail["partitions"]] == [0, 1, 2]
    assert detail["config"]["retention.ms"] == 3_600_000 and detail["config"]["cleanup.policy"] == "compact"
    assert "made-by-kafkajs" in ok(listed)
    (described,) = ok(metadata)["topics"]
    assert sorted(p["partitionId"] for p in described["partitions"]) == [0, 1, 2]
    assert described_configs(node, served, "made-by-kafkajs", ["retention.ms", "cleanup.policy"]) == {
        "retention.ms": "3600000", "cleanup.policy": "compact"}
    assert_topic_intact(served.root, "made-by-kafkajs")


def test_kafkajs_admin_alters_configs(node: str, served: Served) -> None:
    """KafkaJS's alterConfigs is Kafka's AlterConfigs (API 33), not the incremental one: the entries given
    become the topic's whole dynamic config, so one not named goes back to its default."""
    topic = "altered-by-kafkajs"
    create_topic(served.http, topic, 1, **{"retention.ms": 3_600_000})

    def alter(entries: dict[str, str], validate_only: bool = False) -> dict[str, Any]:
        (result,) = admin(node, served, ("alterConfigs", {"validateOnly": validate_only, "resources": [
            {"type": TOPIC_RESOURCE, "name": topic,
             "configEntries": [{"name": k, "value": v} for k, v in entries.items()]}]}))
        return result

    checked = alter({"segment.ms": "1000"}, validate_only=True)
    (resource,) = ok(checked)["resources"]
    assert resource["errorCode"] == 0, resource
    assert topic_detail(served.http, topic)["config"]["segment.ms"] == 7 * 24 * 3600 * 1000  # validated only

    refused = alter({"retention.ms": "soon"})
    assert not refused["ok"] and refused["error"]["type"] == "INVALID_CONFIG", refused
    assert topic_detail(served.http, topic)["config"]["retention.ms"] == 3_600_000

    done = alter({"max.message.bytes": "2000000", "cleanup.policy": "compact,delete"})
    (resource,) = ok(done)["resources"]
    assert (resource["errorCode"], resource["resourceName"]) == (0, topic), resource
    config = topic_detail(served.http, topic)["config"]
    assert config["max.message.bytes"] == 2_000_000 and config["cleanup.policy"] == "compact,delete"
    assert config["retention.ms"] == 7 * 24 * 3600 * 1000  # not named: back to Kafka's default
    assert described_configs(node, served, topic, ["max.message.bytes", "cleanup.policy"]) == {
        "max.message.bytes": "2000000", "cleanup.policy": "compact,delete"}


def consume_all_and_leave(node: str, served: Served, members: list[Member], topic: str, group: str) -> Member:
    """One KafkaJS member reads from the group's position until it committed every partition's end."""
    member = js_member(node, served, topic, group, f"{group}-reader")
    members.append(member)
    wait_committed_to_end(served.http, group, topic)
    member.stop()
    return member


def test_kafkajs_admin_sets_and_resets_offsets(node: str, served: Served, members: list[Member]) -> None:
    """setOffsets commits the offsets given; resetOffsets commits -2 (earliest) or -1 (latest), which
    Kafka keeps as they are and a consumer resolves when it starts (KafkaJS: by its fromBeginning)."""
    topic, group, http = "reset-by-kafkajs", "resettable", served.http
    create_topic(http, topic, 2)
    produce_http(http, topic, [{"key": f"k{i}", "value": str(i), "partition": i % 2} for i in range(20)])
    first = consume_all_and_leave(node, served, members, topic, group)
    assert len(records_of(first.events())) == 20
    assert committed(http, group, topic) == {0: 10, 1: 10}

    set_result, fetched = admin(node, served, (
        "setOffsets", {"groupId": group, "topic": topic, "partitions": [
            {"partition": 0, "offset": "3"}, {"partition": 1, "offset": "7"}]}),
        ("fetchOffsets", {"groupId": group, "topics": [topic]}))
    ok(set_result)
    assert committed(http, group, topic) == {0: 3, 1: 7}
    (fetched_topic,) = ok(fetched)
    assert {p["partition"]: int(p["offset"]) for p in fetched_topic["partitions"]} == {0: 3, 1: 7}

    (earliest,) = admin(node, served, ("resetOffsets", {"groupId": group, "topic": topic, "earliest": True}))
    ok(earliest)
    assert set(committed(http, group, topic).values()) <= {-2, 0}  # kept as sent, or resolved to the start
    again = consume_all_and_leave(node, served, members, topic, group)
    assert sorted(records_of(again.events())) == sorted((r["partition"], r["offset"])
                                                        for r in all_records(http, topic))
    assert committed(http, group, topic) == {0: 10, 1: 10}

    produce_http(http, topic, [{"key": "late", "value": "x", "partition": 0}])
    (latest,) = admin(node, served, ("resetOffsets", {"groupId": group, "topic": topic, "earliest": False}))
    ok(latest)
    after = committed(http, group, topic)
    assert after[0] in (-1, 11) and after[1] in (-1, 10), after
    assert_topic_intact(served.root, topic)


def test_kafkajs_admin_deletes_records(node: str, served: Served) -> None:
    topic, http = "trimmed-by-kafkajs", served.http
    create_topic(http, topic, 2)
    produce_http(http, topic, [{"key": f"k{i}", "value": str(i), "partition": i % 2} for i in range(20)])

    # KafkaJS's deleteTopicRecords finds the leaders in the metadata its client already holds: load it first
    # (without that KafkaJS itself answers "Topic metadata not loaded").
    loaded, deleted, offsets = admin(node, served, ("fetchTopicMetadata", {"topics": [topic]}), (
        "deleteTopicRecords", {"topic": topic, "partitions": [
            {"partition": 0, "offset": "4"}, {"partition": 1, "offset": "-1"}]}),  # -1: up to the end
        ("fetchTopicOffsets", topic))
    ok(loaded)
    ok(deleted)
    partitions = {p["partition"]: p for p in topic_detail(http, topic)["partitions"]}
    assert (partitions[0]["log_start_offset"], partitions[0]["log_end_offset"]) == (4, 10)
    assert (partitions[1]["log_start_offset"], partitions[1]["log_end_offset"]) == (10, 10)
    assert [r["offset"] for r in fetch_all(http, topic, 0, offset=4)] == list(range(4, 10))
    assert fetch_all(http, topic, 1, offset=10) == []
    below = http.get(f"/v1/topics/{topic}/partitions/0/records", params={"offset": 0})
    assert below.status_code != 200 or [r["offset"] for r in below.json()["records"]][:1] == [4], below.text
    assert {p["partition"]: (int(p["low"]), int(p["high"])) for p in ok(offsets)} == {0: (4, 10), 1: (10, 10)}
    assert_topic_intact(served.root, topic)


def test_kafkajs_admin_describes_groups(node: str, served: Served, members: list[Member]) -> None:
    topic, group, http = "described", "describable", served.http
    create_topic(http, topic, 2)
    produce_http(http, topic, [{"key": f"k{i}", "value": str(i)} for i in range(6)])
    member = js_member(node, served, topic, group, "describable-a")
    members.append(member)
    wait_owned(http, group, topic, {"describable-a": 2}, 2)
    wait_committed_to_end(http, group, topic)

    described, listed = admin(node, served, ("describeGroups", [group]), ("listGroups", None))
    (seen,) = ok(described)["groups"]
    over_http = http.get(f"/v1/groups/{group}").json()
    assert (seen["groupId"], seen["state"], seen["protocolType"]) == (group, "Stable", "consumer")
    assert seen["protocol"] == over_http["assignor"] == "RoundRobinAssigner"
    assert [m["memberId"] for m in seen["members"]] == [m["member_id"] for m in over_http["members"]]
    assert seen["members"][0]["clientId"] == "describable-a"
    assert {"groupId": group, "protocolType": "consumer"} in ok(listed)["groups"]

    member.stop()
    (described,) = admin(node, served, ("describeGroups", [group]))
    (seen,) = ok(described)["groups"]
    assert (seen["state"], seen["members"]) == ("Empty", [])
    assert http.get(f"/v1/groups/{group}").json()["state"] == "Empty"
    assert committed(http, group, topic) == end_offsets(http, topic)
    assert_topic_intact(served.root, topic)
