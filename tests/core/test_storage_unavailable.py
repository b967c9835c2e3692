"""Produce never blocks without bound: with the S3 endpoint gone, a retriable error by the deadline."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.s3, pytest.mark.timeout(180)]

# Runs in its own process: a commit stuck on a dead endpoint must not outlive the test runner.
SCENARIO = """
import json, os, signal, sys
from lakelog.platform import Broker, Record
from lakelog.platform.errors import LakelogError
from lakelog.settings import Settings
options, moto_pid = json.loads(sys.argv[1]), int(sys.argv[2])
broker = Broker(Settings(root="s3://private/root", storage=options, linger_ms=1))
broker.create_topic("t", 1)
first = broker.produce("t", [Record(b"before")]).offsets.tolist()
os.kill(moto_pid, signal.SIGKILL)
try:
    broker.produce("t", [Record(b"after")], timeout_ms=1500)
    outcome = {"error": None}
except LakelogError as exc:
    outcome = {"error": exc.code, "retriable": exc.retriable}
print(json.dumps({"first": first, **outcome}), flush=True)
os._exit(0)
"""


def test_produce_to_an_unreachable_store_fails_retriably(moto_process) -> None:
    proc, endpoint = moto_process()
    options = {**endpoint.options, "timeout": "2s", "connect_timeout": "1s"}
    run = subprocess.run([sys.executable, "-c", SCENARIO, json.dumps(options), str(proc.pid)],
                         capture_output=True, text=True, timeout=170)
    assert run.returncode == 0, run.stderr
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    assert outcome["first"] == [0]
    assert outcome["error"] in ("KAFKA_STORAGE_ERROR", "REQUEST_TIMED_OUT")
    assert outcome["retriable"] is True
