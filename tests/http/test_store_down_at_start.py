"""A server whose store is down at start keeps running: /readyz is 503 with the cause, then 200 when the
store comes back; its log says why in one line, not a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import boto3
import httpx
import pytest

from tests.conftest import free_port, start_moto
from tests.http.conftest import REPO
from tests.patience import STUCK_S

pytestmark = [pytest.mark.s3, pytest.mark.timeout(180)]


def wait_for(url: str, status: int, deadline_s: float = 60) -> httpx.Response:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            answer = httpx.get(url, timeout=5)
            if answer.status_code == status:
                return answer
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{url} never answered {status}"
        time.sleep(0.2)


def test_readyz_is_503_with_the_cause_until_the_store_comes_back() -> None:
    s3_port, http_port = free_port(), free_port()
    endpoint = f"http://127.0.0.1:{s3_port}"
    storage = {"aws_endpoint_url": endpoint, "aws_region": "us-east-1", "aws_access_key_id": "test",
               "aws_secret_access_key": "test", "max_retries": "0", "connect_timeout": "1s"}
    env = {**os.environ, "LAKELOG_STORAGE": json.dumps(storage), "LAKELOG_JOBS_INTERVAL_S": "0", "LAKELOG_KAFKA_PORT": "0"}
    server = subprocess.Popen(
        [sys.executable, "-m", "lakelog.cli", "--root", "s3://later/root", "serve", "--port", str(http_port)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    moto = None
    try:
        url = f"http://127.0.0.1:{http_port}"
        down = wait_for(url + "/readyz", 503)
        assert down.json() == {"error_code": "KAFKA_STORAGE_ERROR", "retriable": True, "message":
                               f"cannot use root s3://later/root: endpoint {endpoint} is unreachable "
                               "(connection refused)"}
        assert httpx.get(url + "/healthz", timeout=STUCK_S).status_code == 200  # alive, only not ready
        assert server.poll() is None

        moto = start_moto(s3_port)
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test")
        # The endpoint answers, the bucket is missing: the cause says so.
        missing = wait_for(url + "/readyz", 503)
        deadline = time.monotonic() + STUCK_S
        while "bucket 'later' does not exist" not in missing.text and time.monotonic() < deadline:
            missing = wait_for(url + "/readyz", 503)
        assert missing.json()["message"] == "cannot use root s3://later/root: bucket 'later' does not exist"
        s3.create_bucket(Bucket="later")
        assert wait_for(url + "/readyz", 200).json() == {"status": "ready"}
        created = httpx.post(url + "/v1/topics", json={"name": "t", "partitions": 1}, timeout=STUCK_S)
        assert created.status_code == 201, created.text
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=60)
        if moto is not None:
            moto.kill()
    lines = [json.loads(line) for line in stderr.splitlines()]
    causes = [line["msg"] for line in lines if line["level"] == "warning"]
    assert causes == [
        f"not ready, retrying: cannot use root s3://later/root: endpoint {endpoint} is unreachable (connection refused)",
        "not ready, retrying: cannot use root s3://later/root: bucket 'later' does not exist"]
    assert not any("exc" in line for line in lines)  # no tracebacks
    assert "created a lakelog catalog at s3://later/root" in [line["msg"] for line in lines]
