"""`lakelog serve` runs the maintenance jobs on a schedule in a separate process, tied to the server's life."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import psutil
import pytest
from tests.patience import STUCK_S


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(root: str, port: int, *flags: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    env = {**os.environ, "LAKELOG_JOBS_INTERVAL_S": "3600", "LAKELOG_KAFKA_PORT": "0", **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "lakelog.cli", "--root", root, "serve", "--port", str(port),
                             *flags], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + STUCK_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


def _schedulers(proc: subprocess.Popen) -> list[psutil.Process]:
    return [c for c in psutil.Process(proc.pid).children(recursive=True)
            if "lakelog.spark_jobs.scheduler" in " ".join(c.cmdline())]


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_the_job_scheduler_lives_and_dies_with_the_server(tmp_path, stop) -> None:
    proc = _start(str(tmp_path / "data"), _port())
    try:
        (scheduler,) = _schedulers(proc)
        assert "--interval-s" in scheduler.cmdline() and "3600" in scheduler.cmdline()
        proc.send_signal(stop)
        proc.wait(30)
        gone, alive = psutil.wait_procs([scheduler], timeout=15)
        assert not alive
    finally:
        proc.kill()


def test_no_jobs_flag_runs_the_api_alone(tmp_path) -> None:
    proc = _start(str(tmp_path / "data"), _port(), "--no-jobs")
    try:
        assert _schedulers(proc) == []
    finally:
        proc.kill()


def test_storage_secrets_stay_off_the_scheduler_command_line(tmp_path) -> None:
    """Anyone on the machine can read a command line (`ps`); the scheduler gets its options by environment."""
    secret = "s3cr3t-" + os.urandom(6).hex()
    storage = json.dumps({"aws_secret_access_key": secret, "aws_region": "eu-west-1"})
    proc = _start(str(tmp_path / "data"), _port(), env={"LAKELOG_STORAGE": storage})
    try:
        (scheduler,) = _schedulers(proc)
        assert secret not in " ".join(scheduler.cmdline())
        assert secret not in " ".join(psutil.Process(proc.pid).cmdline())
        assert json.loads(scheduler.environ()["LAKELOG_STORAGE"])["aws_secret_access_key"] == secret
    finally:
        proc.kill()
