"""The `lakelog` command's contract: JSON lines out, one error line and a non-zero exit on failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lakelog.platform.partitioner import partition_for_key

LAKELOG = [sys.executable, "-m", "lakelog.cli"]


def run(root: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAKELOG_ROOT": root}
    return subprocess.run([*LAKELOG, *args], input=stdin, capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def root(tmp_path) -> str:
    return str(tmp_path / "data")


def test_topics_produce_consume(root: str) -> None:
    assert run(root, "topics", "create", "clicks", "--partitions", "3", "--config", "retention.ms=3600000").returncode == 0
    assert json.loads(run(root, "topics", "list").stdout) == {"name": "clicks", "partitions": 3}

    produced = run(root, "produce", "clicks", "--key-separator", ":", stdin="alice:1\nbob:2\nalice:3\n")
    assert produced.returncode == 0, produced.stderr
    acks = [json.loads(line) for line in produced.stdout.splitlines()]
    assert [a["partition"] for a in acks] == [partition_for_key(k, 3) for k in (b"alice", b"bob", b"alice")]
    parts = [a["partition"] for a in acks]
    assert [a["offset"] for a in acks] == [parts[:i].count(parts[i]) for i in range(3)]  # dense per partition

    consumed = [json.loads(line) for line in run(root, "consume", "clicks").stdout.splitlines()]
    assert sorted((c["key"], c["value"]) for c in consumed) == [("alice", "1"), ("alice", "3"), ("bob", "2")]
    assert all(set(c) >= {"topic", "partition", "offset", "timestamp", "key", "value"} for c in consumed)

    p = acks[0]["partition"]
    one = run(root, "consume", "clicks", "--partition", str(p), "--from", str(acks[2]["offset"]), "--max", "1")
    assert [json.loads(line)["value"] for line in one.stdout.splitlines()] == ["3"]

    described = json.loads(run(root, "topics", "describe", "clicks").stdout)
    assert sum(part["log_end_offset"] for part in described["partitions"]) == 3
    assert described["config"]["retention.ms"] == 3600000

    assert run(root, "topics", "alter", "clicks", "--config", "retention.ms=1000").returncode == 0
    assert json.loads(run(root, "topics", "describe", "clicks").stdout)["config"]["retention.ms"] == 1000
    assert run(root, "topics", "delete", "clicks").returncode == 0
    assert run(root, "topics", "list").stdout == ""


def test_explicit_partition_and_binary_values(root: str) -> None:
    run(root, "topics", "create", "t", "--partitions", "2")
    produced = run(root, "produce", "t", "--partition", "1", stdin="x\ny\n")
    assert [json.loads(line) for line in produced.stdout.splitlines()] == [
        {"partition": 1, "offset": 0}, {"partition": 1, "offset": 1}]
    from lakelog.platform import Broker, Record
    with Broker(root=root) as broker:
        broker.produce("t", [Record(b"\xff\xfe", partition=0)])
    (line,) = run(root, "consume", "t", "--partition", "0").stdout.splitlines()
    record = json.loads(line)
    assert record["value_encoding"] == "base64" and record["value"] == "//4="


ERRORS = [
    (("topics", "create", "bad name"), None, "INVALID_TOPIC_EXCEPTION"),
    (("topics", "create", "t2", "--config", "nope=1"), None, "INVALID_CONFIG"),
    (("topics", "create", "t2", "--partitions", "0"), None, "INVALID_PARTITIONS"),
    (("produce", "missing"), "x\n", "UNKNOWN_TOPIC_OR_PARTITION"),
    (("consume", "t", "--partition", "0", "--from", "99"), None, "OFFSET_OUT_OF_RANGE"),
    (("produce", "t", "--partition", "5"), "x\n", "UNKNOWN_TOPIC_OR_PARTITION"),
]


def test_errors_are_one_line_and_exit_nonzero(root: str) -> None:
    run(root, "topics", "create", "t", "--partitions", "1")
    wrong = []
    for args, stdin, code in ERRORS:
        result = run(root, *args, stdin=stdin)
        lines = result.stderr.strip().splitlines()
        if result.returncode == 0 or len(lines) != 1 or code not in lines[0]:
            wrong.append((args, result.returncode, result.stderr))
    assert not wrong, wrong
    assert [json.loads(line)["name"] for line in run(root, "topics", "list").stdout.splitlines()] == ["t"]
    assert run(root, "consume", "t", "--partition", "0").stdout == ""  # nothing was written
