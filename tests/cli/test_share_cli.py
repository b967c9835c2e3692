"""`lakelog share` against a running server (a share group's members live in its memory): consume as a
worker, rejecting records by regex into the dead-letter topic; describe; and `lakelog groups list/describe`
showing the share group, with its type, from the root once the server stopped. Ends with the offset scan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.http.conftest import ThreadServer, create_topic, make_settings
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

LAKELOG = [sys.executable, "-m", "lakelog.cli"]


def run(root: str, *args: str) -> list[dict]:
    result = subprocess.run([*LAKELOG, *args], capture_output=True, text=True, timeout=STUCK_S,
                            env={**os.environ, "LAKELOG_ROOT": root})
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()] if not result.stdout.startswith("{\n") \
        else [json.loads(result.stdout)]


def test_share_consume_rejects_by_regex_and_groups_show_the_share_group(tmp_path: Path) -> None:
    server = ThreadServer(make_settings(tmp_path / "root")).start()
    root = server.root
    try:
        with server.client() as client:
            create_topic(client, "jobs")
            create_topic(client, "jobs-dlq")
            records = [{"key": f"k{i}", "value": "bad" if i == 2 else f"job-{i}"} for i in range(5)]
            assert client.post("/v1/topics/jobs/records", json={"records": records}).status_code == 200
        url = ["--url", server.url]
        config = run(root, "share", "config", "workers", "--set", "share.auto.offset.reset=earliest",
                     "--set", "errors.deadletterqueue.topic.name=jobs-dlq", *url)[0]
        assert config["config"]["errors.deadletterqueue.topic.name"] == "jobs-dlq"
        first = run(root, "share", "consume", "workers", "jobs", "--max", "3", "--reject-if", "^bad$", *url)
        assert [(r["offset"], r["key"], r["value"], r["delivery_count"], r["ack"]) for r in first] == [
            (0, "k0", "job-0", 1, "accept"), (1, "k1", "job-1", 1, "accept"), (2, "k2", "bad", 1, "reject")]
        rest = run(root, "share", "consume", "workers", "jobs", "--wait", "0.5", *url)
        assert [(r["value"], r["ack"]) for r in rest] == [("job-3", "accept"), ("job-4", "accept")]
        described = run(root, "share", "describe", "workers", "-o", "json", *url)[0]
        assert (described["members"], described["partitions"][0]["start_offset"]) == ([], 5)
        assert run(root, "share", "list", "-o", "json", *url) == [
            {"group": "workers", "type": "share", "state": "Empty", "members": 0}]
        server.settle()
    finally:
        server.stop()
    assert run(root, "groups", "list", "-o", "json") == [{"group": "workers", "type": "share", "topics": ["jobs"]}]
    described = run(root, "groups", "describe", "workers", "-o", "json")[0]
    assert (described["type"], described["partitions"][0]["start_offset"], described["partitions"][0]["lag"]) == (
        "share", 5, 0)
    letters = run(root, "consume", "jobs-dlq")
    assert [(r["value"], {h["key"]: h["value"] for h in r["headers"]}["lakelog.dlq.reason"]) for r in letters] == [
        ("bad", "rejected")]
    assert_topic_intact(root, "jobs")
    assert_topic_intact(root, "jobs-dlq")
