"""A streaming copy src -> dst through the lakelog sink, run as its own process by the crash test."""

from __future__ import annotations

import os
import sys
import time

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def copy_query(spark, root: str, checkpoint: str):
    return (spark.readStream.format("lakelog").option("lakelog.root", root).option("subscribe", "src")
            .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "25")
            .option("includeHeaders", "true").load()
            .selectExpr("key", "value", "headers")
            .writeStream.format("lakelog").option("lakelog.root", root).option("topic", "dst")
            .option("checkpointLocation", checkpoint).start())


if __name__ == "__main__":
    from pyspark.sql import SparkSession

    from lakelog.spark_jobs import register

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "1").getOrCreate())
    register(spark)
    copy_query(spark, sys.argv[1], sys.argv[2])
    time.sleep(600)  # until killed
