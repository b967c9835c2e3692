"""Real servers for the HTTP tests: uvicorn on 127.0.0.1 (a thread, or a subprocess for SIGKILL), httpx clients."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
import uvicorn

from lakelog.ingest_api import create_app
from lakelog.settings import Settings
from tests.conftest import free_port  # noqa: F401  (re-exported: tests import it from here)
from tests.patience import STUCK_S

REPO = Path(__file__).resolve().parents[2]
TEST_DEFAULTS: dict[str, Any] = {
    "group_initial_rebalance_delay_ms": 0,
    "group_min_session_timeout_ms": 100,
    "linger_ms": 5,
    "kafka_port": 0,  # a free port: test servers run side by side
}




class ThreadServer:
    """uvicorn in a thread of the test process; stop() is a graceful shutdown; a new one may take the same
    root and port (a restart)."""

    def __init__(self, settings: Settings, port: int | None = None) -> None:
        self.port = port or free_port()
        self.settings = settings.model_copy(update={"port": self.port})  # the address it advertises
        self.app = create_app(self.settings)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                access_log=False, lifespan="on", log_config=None, timeout_graceful_shutdown=10)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def root(self) -> str:
        return self.settings.root

    @property
    def bootstrap(self) -> str:
        """The Kafka listener's address (bootstrap.servers)."""
        return f"127.0.0.1:{self.app.state.kafka.port}"

    def start(self) -> "ThreadServer":
        self.thread.start()
        deadline = time.monotonic() + STUCK_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, **{"timeout": STUCK_S, **kwargs})

    def settle(self) -> None:
        """Wait until every produce the server accepted so far is acknowledged and in its topic's table (the
        node journal commits tables behind the answer; acks=0 answers before either)."""
        self.app.state.services.broker.flush()


class ProcessServer:
    """`python -m lakelog.cli serve` in a subprocess: for SIGKILL and restart tests."""

    def __init__(self, root: str, env: dict[str, str] | None = None, port: int | None = None) -> None:
        self.root = root
        self.port = port or free_port()
        self.kafka_port = free_port()
        self.env = {**os.environ, "LAKELOG_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
                    "LAKELOG_KAFKA_PORT": str(self.kafka_port),
                    "LAKELOG_GROUP_MIN_SESSION_TIMEOUT_MS": "100", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        # Its log goes to a file: a pipe nobody reads would block the server once 64 KB of warnings filled it.
        self.log_file = tempfile.NamedTemporaryFile(prefix="lakelog-server-", suffix=".log", delete=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.env['LAKELOG_KAFKA_PORT']}"

    def start(self) -> "ProcessServer":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lakelog.cli", "--root", self.root, "serve", "--port", str(self.port)],
            cwd=REPO, env=self.env, stdout=subprocess.DEVNULL, stderr=self.log_file,
        )
        deadline = time.monotonic() + STUCK_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_tail()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the server subprocess did not become ready")
            time.sleep(0.1)

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server's log (every start of this server appends to it)."""
        with open(self.log_file.name, "rb") as log:
            return log.read().decode(errors="replace")[-chars:]

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, **{"timeout": STUCK_S, **kwargs})


def make_settings(root: Path | str, **overrides: Any) -> Settings:
    return Settings(root=str(root), **{**TEST_DEFAULTS, **overrides})


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., ThreadServer]]:
    """Start servers (same root unless given; a port to restart on); all are stopped at the end."""
    started: list[ThreadServer] = []

    def start(root: Path | str | None = None, port: int | None = None, **overrides: Any) -> ThreadServer:
        server = ThreadServer(make_settings(root or tmp_path / "root", **overrides), port).start()
        started.append(server)
        return server

    yield start
    for server in started:
        if server.thread.is_alive():
            server.stop()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    """One server per test module; tests use their own topic and group names."""
    server = ThreadServer(make_settings(tmp_path_factory.mktemp("shared"))).start()
    yield server
    server.stop()


@pytest.fixture
def client(shared_server: ThreadServer) -> Iterator[httpx.Client]:
    with shared_server.client() as c:
        yield c


_names = iter(range(10**9))


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    return f"t{next(_names)}-{request.node.name[:40]}".replace("[", "-").replace("]", "").replace("/", "-")


def create_topic(client: httpx.Client, name: str, partitions: int = 1, **config: Any) -> dict[str, Any]:
    response = client.post("/v1/topics", json={"name": name, "partitions": partitions, "config": config})
    assert response.status_code == 201, response.text
    return response.json()


def end_offsets(client: httpx.Client, topic: str) -> list[int]:
    response = client.get(f"/v1/topics/{topic}")
    assert response.status_code == 200, response.text
    return [p["log_end_offset"] for p in response.json()["partitions"]]


def fetch_all(client: httpx.Client, topic: str, partition: int, **params: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = params.pop("offset", 0)
    while True:
        response = client.get(f"/v1/topics/{topic}/partitions/{partition}/records",
                              params={"offset": offset, "max_records": 5000, **params})
        assert response.status_code == 200, response.text
        records = response.json()["records"]
        if not records:
            return out
        out.extend(records)
        offset = records[-1]["offset"] + 1


@pytest.fixture(autouse=True, scope="session")
def _quiet_logs() -> None:
    for name in ("werkzeug", "uvicorn.error", "uvicorn.access", "botocore", "s3fs"):
        logging.getLogger(name).setLevel(logging.ERROR)
