"""Shared fixtures: a local root, a real S3 endpoint on loopback (moto server mode), brokers on both."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import pytest

from tests.patience import STUCK_S

if TYPE_CHECKING:
    from s3_latency import CounterView, DelayProxy

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Servers started by tests run no job schedule unless a test asks for one.
os.environ.setdefault("LAKELOG_JOBS_INTERVAL_S", "0")


# Under `make test` (two xdist workers, --dist loadgroup): the Spark tests run on one worker (one JVM, one
# after another) and Terraform's on one (they share one applied stack). tests/cluster runs apart.
SERIAL_GROUPS = {"spark": "spark", "infra": "infra"}


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's loadgroup, grouped by folder. Its own grouping reads `xdist_group` marks through node ids
    that pytest 9 no longer lets a plugin rewrite, so those marks would be silently ignored."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FolderGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            folder = nodeid.split("::")[0].split("/")[-2]
            return SERIAL_GROUPS.get(folder, nodeid)

    return FolderGroups(config, log)


_ISSUED: set[int] = set()


def free_port() -> int:
    """A port for a server a test starts later, below the kernel's ephemeral range (which outgoing
    connections take from) and in a range of its own per xdist worker, never handed out twice."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    low = 20_000 + (worker % 2) * 6_000
    while True:
        port = random.randrange(low, low + 6_000)
        if port in _ISSUED:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _ISSUED.add(port)
        return port


class S3Endpoint:
    def __init__(self, port: int, bucket: str) -> None:
        self.port = port
        self.bucket = bucket
        self.endpoint = f"http://127.0.0.1:{port}"

    @property
    def options(self) -> dict[str, str]:
        return {"aws_endpoint_url": self.endpoint, "aws_region": "us-east-1",
                "aws_access_key_id": "test", "aws_secret_access_key": "test"}

    def root(self, name: str = "") -> str:
        return f"s3://{self.bucket}/{name or uuid.uuid4().hex[:10]}"


class ProxiedS3(S3Endpoint):
    """An S3 endpoint seen through a DelayProxy (tests/s3_latency.py): the proxy's port, the same bucket;
    `.counter` counts the requests by kind, `.delay` (one way, seconds) can change at any time."""

    def __init__(self, proxy: "DelayProxy", bucket: str) -> None:
        super().__init__(proxy.port, bucket)
        self.proxy = proxy

    @property
    def counter(self) -> "CounterView":
        return self.proxy.counter

    @property
    def delay(self) -> float:
        return self.proxy.delay

    @delay.setter
    def delay(self, one_way_delay_s: float) -> None:
        self.proxy.delay = one_way_delay_s


MOTO_SERVER = """
import logging, sys
from moto.server import ThreadedMotoServer
sys.path.insert(0, sys.argv[2])
from moto_fidelity import make_conditional_writes_atomic
make_conditional_writes_atomic()  # as S3 applies If-None-Match (tests/moto_fidelity.py)
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(sys.argv[1]), verbose=False)
server.start()
sys.stdin.read()  # until the test session closes our stdin
server.stop()
"""


def start_moto(port: int) -> subprocess.Popen:
    """moto's server mode in its own process: delta-rs calls that hold the GIL cannot stall it."""
    proc = subprocess.Popen([sys.executable, "-c", MOTO_SERVER, str(port), str(Path(__file__).parent)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + STUCK_S
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto server did not start")


@pytest.fixture
def moto_process() -> Iterator[Callable[[], tuple[subprocess.Popen, S3Endpoint]]]:
    """Starts private S3 endpoints (one bucket each) that a test may kill."""
    started: list[subprocess.Popen] = []

    def start() -> tuple[subprocess.Popen, S3Endpoint]:
        import boto3

        port = free_port()
        proc = start_moto(port)
        started.append(proc)
        endpoint = S3Endpoint(port, "private")
        boto3.client("s3", endpoint_url=endpoint.endpoint, region_name="us-east-1", aws_access_key_id="test",
                     aws_secret_access_key="test").create_bucket(Bucket=endpoint.bucket)
        return proc, endpoint

    yield start
    for proc in started:
        proc.kill()


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Endpoint]:
    """A real S3 endpoint (moto's server) on 127.0.0.1, one bucket for the session."""
    import boto3

    for key, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ.setdefault(key, value)
    port = free_port()
    proc = start_moto(port)
    endpoint = S3Endpoint(port, "lakelog-test")
    boto3.client("s3", endpoint_url=endpoint.endpoint, region_name="us-east-1",
                 aws_access_key_id="test", aws_secret_access_key="test").create_bucket(Bucket=endpoint.bucket)
    yield endpoint
    proc.stdin.close()  # type: ignore[union-attr]
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def s3_proxy(s3: S3Endpoint) -> Iterator[ProxiedS3]:
    """The session's S3 endpoint behind a delaying, counting proxy. No delay (counting only) until the
    test sets `.delay` to a preset of s3_latency (S3_STANDARD, S3_EXPRESS)."""
    # Imported here: benchmarks import this file as tests.conftest, where `s3_latency` is not on sys.path.
    from s3_latency import DelayProxy

    with DelayProxy(s3.port) as proxy:
        yield ProxiedS3(proxy, s3.bucket)


@pytest.fixture
def moto_endpoint() -> Iterator[str]:
    """moto's server in its own process: the final integrity check reads through delta-rs, which holds the GIL."""
    import boto3

    port = free_port()
    proc = start_moto(port)
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                          region_name="us-east-1")
    for bucket in ("lakelog-crash", "lakelog-cluster"):
        client.create_bucket(Bucket=bucket)
    yield endpoint
    proc.kill()
    proc.wait(10)


def s3_env(endpoint: str) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint}
