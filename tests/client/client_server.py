"""Real servers for the client tests: uvicorn on 127.0.0.1 in a thread, restartable on the same root and port."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import uvicorn

from lakelog.ingest_api import create_app
from lakelog.settings import Settings

TEST_DEFAULTS: dict[str, Any] = {
    "group_initial_rebalance_delay_ms": 0,
    "group_min_session_timeout_ms": 100,
    "linger_ms": 5,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """uvicorn in a thread; stop() is a graceful shutdown; a new Server may take the same root and port."""

    def __init__(self, root: str, port: int | None = None, **overrides: Any) -> None:
        self.root = root
        self.port = port or free_port()
        self.app = create_app(Settings(root=root, **{**TEST_DEFAULTS, **overrides}))
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False,
                                lifespan="on", log_config=None, timeout_graceful_shutdown=10)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Server":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start servers (on tmp_path/root unless given); all are stopped at the end."""
    started: list[Server] = []

    def start(root: str | None = None, port: int | None = None, **overrides: Any) -> Server:
        server = Server(root or str(tmp_path / "root"), port, **overrides).start()
        started.append(server)
        return server

    yield start
    for server in started:
        if server.thread.is_alive():
            server.stop()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(str(tmp_path_factory.mktemp("client-shared"))).start()
    yield server
    server.stop()
