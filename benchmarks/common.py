"""Helpers shared by the benchmark suites: figures, percentiles, machine description."""

from __future__ import annotations

import gc
import os
import platform as std_platform
import socket
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Iterator
from contextlib import contextmanager

import httpx
import numpy as np
import psutil

if TYPE_CHECKING:
    from tests.s3_latency import DelayProxy


@dataclass
class Figure:
    suite: str
    name: str
    value: float
    unit: str
    target: str = ""
    met: bool | None = None
    ratio: float | None = None
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def percentile(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q)) if samples else float("nan")


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 1e6


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    box: list[float] = []
    start = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - start)


@contextmanager
def server_heap() -> Iterator[None]:
    """Set up before the block is frozen out of the collector's sight, as `lakelog serve` does once ready
    (lakelog/ingest_api/app.py): an in-process benchmark of the produce path then meets the full
    collections a server meets, not those of this process's start-up (a 100 ms pause at 170,000 objects)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def machine() -> str:
    cpu = std_platform.processor() or "unknown cpu"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = psutil.virtual_memory().total / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, {std_platform.system()} {std_platform.release()}, " \
           f"Python {std_platform.python_version()}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def s3_behind_proxy(bucket: str) -> Iterator["DelayProxy"]:
    """moto's S3 server on a free loopback port, `bucket` created in it, behind the delaying and counting proxy
    of tests/s3_latency.py (no delay until the caller sets one); moto is stopped at the end."""
    import boto3

    from tests.conftest import start_moto
    from tests.s3_latency import DelayProxy

    port = free_port()
    moto = start_moto(port)
    try:
        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                     aws_access_key_id="test", aws_secret_access_key="test").create_bucket(Bucket=bucket)
        with DelayProxy(port) as proxy:
            yield proxy
    finally:
        moto.stdin.close()  # type: ignore[union-attr]
        moto.kill()
        moto.wait()


def wait_ready(url: str, proc: Any, deadline: float, what: str) -> None:
    """Until `url`'s /readyz answers 200; RuntimeError naming `what` once `proc` ends or `deadline` passes."""
    while True:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.1)
