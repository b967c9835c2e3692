"""`lakelog groups`, `consume --group`, headers and `--output table|json`, run as the installed command
would be (a subprocess) against a real local root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from lakelog.platform import Broker, Record
from tests.http.conftest import start_server  # noqa: F401  (the fixture)

LAKELOG = [sys.executable, "-m", "lakelog.cli"]


def run(root: str, *args: str, stdin: str | None = None, env: dict[str, str] | None = None,
        ok: bool = True) -> subprocess.CompletedProcess:
    environment = {**os.environ, "LAKELOG_ROOT": root, **(env or {})}
    result = subprocess.run([*LAKELOG, *args], input=stdin, capture_output=True, text=True, env=environment,
                            timeout=120)
    if ok:
        assert result.returncode == 0, result.stderr
    return result


def as_json(root: str, *args: str) -> dict:
    return json.loads(run(root, *args, "--output", "json").stdout)


def lines(result: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def committed(root: str, group: str) -> dict[tuple[str, int], int | None]:
    return {(p["topic"], p["partition"]): p["current_offset"]
            for p in as_json(root, "groups", "describe", group)["partitions"]}


@pytest.fixture
def root(tmp_path) -> str:
    """`orders`: a0..a4 in partition 0, b0..b2 in partition 1 (set up in-process: the CLI's produce has its
    own tests; a subprocess costs a second of imports)."""
    root = str(tmp_path / "data")
    with Broker(root=root) as broker:
        broker.create_topic("orders", 2)
        broker.produce("orders", [Record(f"a{i}".encode(), partition=0) for i in range(5)])
        broker.produce("orders", [Record(f"b{i}".encode(), partition=1) for i in range(3)])
    return root


def test_consume_group_commits_as_it_goes_and_resumes(root: str) -> None:
    first = lines(run(root, "consume", "orders", "--group", "g", "--auto-offset-reset", "earliest", "--max", "4"))
    assert [(r["partition"], r["offset"]) for r in first] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    described = as_json(root, "groups", "describe", "g")
    assert [(p["partition"], p["current_offset"], p["log_end_offset"], p["lag"], p["consumer_id"])
            for p in described["partitions"]] == [(0, 4, 5, 1, None), (1, 0, 3, 3, None)]
    assert "GET /v1/groups/g" in described["note"]

    rest = lines(run(root, "consume", "orders", "--group", "g"))  # resumes after the committed offsets
    assert [(r["partition"], r["offset"], r["value"]) for r in rest] == [
        (0, 4, "a4"), (1, 0, "b0"), (1, 1, "b1"), (1, 2, "b2")]
    assert [p["lag"] for p in as_json(root, "groups", "describe", "g")["partitions"]] == [0, 0]
    assert run(root, "consume", "orders", "--group", "g").stdout == ""  # nothing left

    run(root, "produce", "orders", "--partition", "1", stdin="b3\n")
    assert [p["lag"] for p in as_json(root, "groups", "describe", "g")["partitions"]] == [0, 1]
    assert [r["value"] for r in lines(run(root, "consume", "orders", "--group", "g"))] == ["b3"]


def test_auto_offset_reset_applies_to_partitions_without_a_commit(root: str) -> None:
    assert run(root, "consume", "orders", "--group", "late").stdout == ""  # Kafka's default: latest
    assert committed(root, "late") == {("orders", 0): 5, ("orders", 1): 3}
    run(root, "produce", "orders", "--partition", "0", stdin="new\n")
    assert [r["value"] for r in lines(run(root, "consume", "orders", "--group", "late"))] == ["new"]

    refused = run(root, "consume", "orders", "--group", "strict", "--auto-offset-reset", "none", ok=False)
    assert refused.returncode == 1 and refused.stderr.startswith("error: OFFSET_OUT_OF_RANGE: no committed offset")
    assert refused.stdout == ""


def test_reset_offsets_dry_run_changes_nothing_and_execute_commits_the_plan(root: str) -> None:
    run(root, "consume", "orders", "--group", "g", "--auto-offset-reset", "earliest")
    before = committed(root, "g")
    assert before == {("orders", 0): 5, ("orders", 1): 3}

    dry = as_json(root, "groups", "reset-offsets", "g", "--topic", "orders", "--shift-by", "-2")
    assert dry["executed"] is False
    assert [(p["partition"], p["current_offset"], p["new_offset"]) for p in dry["partitions"]] == [(0, 5, 3), (1, 3, 1)]
    assert committed(root, "g") == before

    done = as_json(root, "groups", "reset-offsets", "g", "--topic", "orders", "--shift-by", "-2", "--execute")
    assert done["executed"] is True and done["partitions"] == dry["partitions"]
    assert committed(root, "g") == {("orders", 0): 3, ("orders", 1): 1}
    assert [(r["partition"], r["offset"]) for r in lines(run(root, "consume", "orders", "--group", "g"))] == [
        (0, 3), (0, 4), (1, 1), (1, 2)]

    as_json(root, "groups", "reset-offsets", "g", "--topic", "orders:1", "--to-offset", "99", "--execute")
    assert committed(root, "g") == {("orders", 0): 5, ("orders", 1): 3}  # clamped to the log end
    as_json(root, "groups", "reset-offsets", "g", "--all-topics", "--to-earliest", "--execute")
    assert committed(root, "g") == {("orders", 0): 0, ("orders", 1): 0}
    as_json(root, "groups", "reset-offsets", "g", "--topic", "orders:0", "--to-offset", "2", "--execute")
    assert committed(root, "g") == {("orders", 0): 2, ("orders", 1): 0}
    as_json(root, "groups", "reset-offsets", "g", "--all-topics", "--to-latest", "--execute")
    assert committed(root, "g") == {("orders", 0): 5, ("orders", 1): 3}
    as_json(root, "groups", "reset-offsets", "g", "--all-topics", "--to-datetime", "2000-01-01T00:00:00",
            "--execute")
    assert committed(root, "g") == {("orders", 0): 0, ("orders", 1): 0}
    future = as_json(root, "groups", "reset-offsets", "g", "--all-topics", "--to-datetime", "2999-01-01T00:00:00Z")
    assert [p["new_offset"] for p in future["partitions"]] == [5, 3]  # no record after it: the log end


def test_list_and_delete(root: str) -> None:
    run(root, "consume", "orders", "--group", "one", "--auto-offset-reset", "earliest")
    run(root, "consume", "orders", "--group", "two", "--partition", "1")
    assert lines(run(root, "groups", "list", "--output", "json")) == [
        {"group": "one", "type": None, "topics": ["orders"]}, {"group": "two", "type": None, "topics": ["orders"]}]
    assert lines(run(root, "groups", "delete", "one")) == [{"deleted": "one"}]
    assert [g["group"] for g in lines(run(root, "groups", "list", "--output", "json"))] == ["two"]
    again = run(root, "groups", "delete", "one", ok=False)
    assert again.returncode == 1 and again.stderr == "error: GROUP_ID_NOT_FOUND: unknown group 'one'\n"
    assert committed(root, "two") == {("orders", 1): 3}


ERRORS = [
    (("groups", "describe", "nope"), "error: GROUP_ID_NOT_FOUND: "),
    (("groups", "reset-offsets", "g", "--topic", "orders"), "error: give exactly one of --to-earliest"),
    (("groups", "reset-offsets", "g", "--to-earliest"), "error: give --topic (repeatable) or --all-topics"),
    (("groups", "reset-offsets", "g", "--topic", "orders", "--to-datetime", "soon"), "error: INVALID_REQUEST: "),
    (("groups", "reset-offsets", "g", "--topic", "orders:7", "--to-earliest"), "error: UNKNOWN_TOPIC_OR_PARTITION: "),
    (("groups", "reset-offsets", "g", "--topic", "orders:x", "--to-earliest"), "error: --topic takes TOPIC"),
    (("groups", "describe", "g", "--output", "yaml"), "error: --output takes table or json"),
    (("consume", "orders", "--group", "g", "--from", "0"), "error: --from does not go with --group"),
    (("consume", "orders", "--group", ""), "error: INVALID_GROUP_ID: "),  # any other id is a group's
]


def test_errors_are_one_line_and_exit_1(root: str) -> None:
    run(root, "consume", "orders", "--group", "g", "--auto-offset-reset", "earliest")
    before = committed(root, "g")
    wrong = []
    for args, message in ERRORS:
        result = run(root, *args, ok=False)
        if result.returncode != 1 or not result.stderr.startswith(message) or result.stderr.count("\n") != 1:
            wrong.append((args, result.returncode, result.stderr))
    assert not wrong, wrong
    assert committed(root, "g") == before  # bad input changed nothing


def test_headers_go_through_produce_and_consume(root: str) -> None:
    run(root, "produce", "orders", "--partition", "1", "--header", "trace=abc", "-H", "empty=", "-H", "k==v",
        stdin="with-headers\n")
    (record,) = lines(run(root, "consume", "orders", "--partition", "1", "--from", "3"))
    assert record["value"] == "with-headers"
    assert record["headers"] == [{"key": "trace", "value": "abc"}, {"key": "empty", "value": ""},
                                 {"key": "k", "value": "=v"}]
    (plain,) = lines(run(root, "consume", "orders", "--partition", "1", "--max", "1"))
    assert plain["headers"] == []
    bad = run(root, "produce", "orders", "--header", "novalue", stdin="x\n", ok=False)
    assert bad.returncode == 1 and bad.stderr == "error: --header takes key=value, got 'novalue'\n"


def table(result: subprocess.CompletedProcess) -> list[list[str]]:
    """An aligned table's rows split into cells (the rule under the header left out)."""
    return [line.split() for line in result.stdout.splitlines() if line and not line.startswith("─")]


def test_tables_and_json(root: str) -> None:
    run(root, "consume", "orders", "--group", "g", "--auto-offset-reset", "earliest", "--max", "2")
    assert table(run(root, "topics", "list", "--output", "table")) == [["TOPIC", "PARTITIONS"], ["orders", "2"]]
    assert lines(run(root, "topics", "list")) == [{"name": "orders", "partitions": 2}]  # piped: JSON lines

    rows = table(run(root, "topics", "describe", "orders", "-o", "table"))
    assert rows[0] == ["TOPIC", "PARTITION", "LOG-START-OFFSET", "LOG-END-OFFSET", "SIZE-BYTES"]
    assert [r[:4] for r in rows[1:3]] == [["orders", "0", "0", "5"], ["orders", "1", "0", "3"]]
    assert rows[3][0] == "Configs:" and "retention.ms=604800000" in rows[3][1]
    described = as_json(root, "topics", "describe", "orders")
    assert [p["log_end_offset"] for p in described["partitions"]] == [5, 3] and "replication" not in described

    out = run(root, "groups", "describe", "g", "-o", "table")
    assert table(out) == [["GROUP", "TYPE", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                           "CONSUMER-ID"],
                          ["g", "-", "orders", "0", "2", "5", "3", "-"],
                          ["g", "-", "orders", "1", "0", "3", "3", "-"]]
    header = out.stdout.splitlines()[0]
    assert [len(line) > header.index("LAG") for line in out.stdout.splitlines()] == [True] * 4  # aligned columns
    assert "GET /v1/groups/g" in out.stderr
    assert table(run(root, "groups", "list", "-o", "table")) == [["GROUP", "TYPE", "TOPICS"], ["g", "-", "orders"]]
    dry = run(root, "groups", "reset-offsets", "g", "--topic", "orders:0", "--to-earliest", "-o", "table")
    assert table(dry) == [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], ["g", "orders", "0", "2", "0"]]
    assert "dry run" in dry.stderr


def test_topics_describe_shows_leader_replicas_and_isr_when_replicated(tmp_path) -> None:
    sites = {"a": str(tmp_path / "a"), "b": str(tmp_path / "b")}
    env = {"LAKELOG_SITES": json.dumps(sites)}
    root = sites["a"]
    run(root, "topics", "create", "rep", "--partitions", "2", "--config", "replication.factor=2", env=env)
    run(root, "produce", "rep", "--acks", "all", "--partition", "1", stdin="x\n", env=env)
    described = json.loads(run(root, "topics", "describe", "rep", "-o", "json", env=env).stdout)
    replication = described["replication"]
    assert sorted(replication["replicas"]) == ["a", "b"] and replication["leader"] in sites
    assert sorted(replication["isr"]) == ["a", "b"]
    for p in described["partitions"]:
        assert (p["leader"], p["replicas"], p["isr"]) == (
            replication["leader"], replication["replicas"], replication["isr"])
    rows = table(run(root, "topics", "describe", "rep", "-o", "table", env=env))
    assert rows[0][-3:] == ["LEADER", "REPLICAS", "ISR"]
    assert rows[2][3] == "1" and rows[2][-3:] == [replication["leader"], ",".join(replication["replicas"]),
                                                  ",".join(replication["isr"])]


def test_tables_never_truncate_cells(root: str) -> None:
    group = "a-consumer-group-with-a-rather-long-name-" + "x" * 60
    run(root, "consume", "orders", "--group", group, "--partition", "0")
    out = run(root, "groups", "describe", group, "-o", "table", env={"TERM": "dumb", "COLUMNS": "40"})
    assert table(out)[1] == [group, "-", "orders", "0", "5", "5", "0", "-"]


def test_groups_list_with_url_shows_each_group_s_type_from_the_running_server(start_server) -> None:  # noqa: ANN001
    """A classic group (an HTTP member) and a KIP-848 group (confluent-kafka, group.protocol=consumer) on a
    running server: `--url` gives their types; without it the CLI cannot know them."""
    from confluent_kafka import Consumer

    from tests.http.conftest import ThreadServer
    from tests.log_check import assert_topic_intact
    from tests.patience import STUCK_S

    server: ThreadServer = start_server(group_consumer_heartbeat_interval_ms=500)
    with server.client() as c:
        c.post("/v1/topics", json={"name": "typed-groups", "partitions": 2}).raise_for_status()
        c.post("/v1/groups/http-readers/members", json={"topics": ["typed-groups"]}).raise_for_status()
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "next-readers",
                         "group.protocol": "consumer"})
    consumer.subscribe(["typed-groups"])
    try:
        deadline = time.monotonic() + STUCK_S
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the KIP-848 member never got its assignment"
            consumer.poll(0.1)
        types = {g["group"]: g["type"] for g in lines(run(server.root, "groups", "list", "--url", server.url))}
        assert types == {"http-readers": "classic", "next-readers": "consumer"}
        described = json.loads(run(server.root, "groups", "describe", "next-readers", "--url", server.url,
                                   "--output", "json").stdout)
        assert described["type"] == "consumer"
        untyped = {g["group"]: g["type"] for g in lines(run(server.root, "groups", "list"))}
        assert all(kind is None for kind in untyped.values())
    finally:
        consumer.close()
    assert_topic_intact(server.root, "typed-groups")
