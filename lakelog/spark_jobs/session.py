"""SparkSessions for the jobs: local mode for the CLI and the scheduler, the cluster's for spark-submit."""

from __future__ import annotations

import os
import sys
from typing import Any


def local_session(app_name: str = "lakelog-jobs", cores: str = "*") -> Any:
    """A quiet local SparkSession whose Python workers run this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(f"local[{cores}]").appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def cluster_session(app_name: str = "lakelog-jobs") -> Any:
    """The session spark-submit provides (master and resources come from the cluster)."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.appName(app_name).getOrCreate()
