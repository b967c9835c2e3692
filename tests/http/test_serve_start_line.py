"""`lakelog serve` says once where it listens, on which root, with authentication on or off; an access log
only when asked; nothing else at the default level."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.http.conftest import REPO, free_port
from tests.patience import STUCK_S


def serve(root: Path, *flags: str, topic: str = "t", env: dict[str, str] | None = None) -> tuple[list[dict], int, int]:
    """Start, create a topic, stop: the JSON log lines on stderr, the HTTP and the Kafka port."""
    port, kafka_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "lakelog.cli", "--root", str(root), "serve", "--port", str(port),
                             "--kafka-port", str(kafka_port), "--no-jobs", *flags], cwd=REPO, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + STUCK_S
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
        headers = {"Authorization": "Bearer k1"}
        assert httpx.post(f"http://127.0.0.1:{port}/v1/topics", json={"name": topic, "partitions": 1},
                          headers=headers, timeout=STUCK_S).status_code == 201
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    return [json.loads(line) for line in stderr.splitlines()], port, kafka_port


def test_start_line_then_quiet(tmp_path: Path) -> None:
    lines, port, kafka_port = serve(tmp_path / "root")
    assert [line["msg"] for line in lines] == [
        f"created a lakelog catalog at {tmp_path / 'root'}",
        f"lakelog serving http://127.0.0.1:{port} kafka://127.0.0.1:{kafka_port} root={tmp_path / 'root'} "
        "authentication=off",
    ]
    assert all(line["level"] == "info" and line["logger"] == "lakelog.startup" for line in lines)


def test_access_log_and_authentication_on(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    serve(tmp_path / "root")  # the catalog exists from here on
    lines, port, kafka_port = serve(tmp_path / "root", "--access-log", topic="u",
                                    env={"LAKELOG_API_KEYS_JSON": json.dumps({"k1": "admin"})})
    messages = [line["msg"] for line in lines]
    assert messages[0] == (f"lakelog serving http://127.0.0.1:{port} kafka://127.0.0.1:{kafka_port} "
                           f"root={tmp_path / 'root'} authentication=on")
    access = [line for line in lines if line["logger"] == "uvicorn.access"]
    assert any('"GET /readyz HTTP/1.1" 200' in line["msg"] for line in access)
    assert any('"POST /v1/topics HTTP/1.1" 201' in line["msg"] for line in access)
    assert len(access) == len(lines) - 1
