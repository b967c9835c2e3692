"""The replication job on Spark: files copied on executors, commits in order; killed mid-run and restarted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from lakelog.platform import Broker, Record
from lakelog.settings import Settings
from tests.patience import STUCK_S

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def test_replication_job_killed_mid_run_then_restarted_leaves_identical_tables(tmp_path, table_fingerprint) -> None:
    sites = {"a": str(tmp_path / "a"), "b": str(tmp_path / "b")}
    settings = Settings(root=str(tmp_path / "unused"), sites=sites, linger_ms=0, replication_interval_ms=0)
    with Broker(settings) as broker:
        broker.create_topic("t", 4, {"replication.factor": 2}, replicas=["a", "b"])
        payload = b"x" * 20_000
        for i in range(120):  # acks=1: the follower falls behind
            broker.produce("t", [Record(payload, key=f"k{i}".encode()) for _ in range(20)], acks=1)
    env = {**os.environ, "LAKELOG_SITES": json.dumps(sites), "LAKELOG_REPLICATION_INTERVAL_MS": "0"}
    command = [sys.executable, "-m", "lakelog.spark_jobs.submit", "replicate", "--root", str(tmp_path / "unused"),
               "--local"]
    job = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    follower_table = tmp_path / "b" / "topics" / "t"
    deadline = time.monotonic() + STUCK_S
    while time.monotonic() < deadline and job.poll() is None:
        if len([f for f in follower_table.glob("*.parquet")]) >= 20:  # some data files copied (layout 2)
            break
        time.sleep(0.05)
    job.send_signal(signal.SIGKILL)
    job.wait()

    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout.strip().splitlines()[-1])
    assert report["commits"] > 0
    with Broker(settings) as broker:
        a, b = broker.replicas.sites["a"], broker.replicas.sites["b"]
        assert table_fingerprint(a, "t") == table_fingerprint(b, "t")
        again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert json.loads(again.stdout.strip().splitlines()[-1])["commits"] == 0  # nothing left to do
