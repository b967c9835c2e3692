"""One local SparkSession for every Spark test (startup costs seconds), and topic helpers."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def spark() -> Iterator["SparkSession"]:  # noqa: F821
    from pyspark.sql import SparkSession

    from lakelog.spark_jobs import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("lakelog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture()
def root(tmp_path) -> str:
    return str(tmp_path / "lake")


@pytest.fixture()
def broker(root):
    from lakelog.platform import Broker

    b = Broker(root=root, linger_ms=0)
    yield b
    b.close()
