"""Spark on lakelog: the `lakelog` data source and the maintenance jobs.

    from lakelog.spark_jobs import register
    register(spark)
    spark.read.format("lakelog").option("lakelog.root", "./data").option("subscribe", "orders").load()
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the `lakelog` format with a SparkSession (PySpark's Python data source API, Spark 4.0+)."""
    from lakelog.spark_jobs.source import LakelogDataSource

    spark.dataSource.register(LakelogDataSource)


__all__ = ["register"]
