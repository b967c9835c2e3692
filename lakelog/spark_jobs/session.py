"""SparkSessions for the jobs: local mode for the CLI and the scheduler, the cluster's for spark-submit."""

from __future__ import annotations

import os
import sys
from typing import Any

from lakelog.settings import Settings

# Spark's own log (log4j2) goes to a file, WARN and above: it stays out of the server's JSON log on stderr.
LOG4J2_PROPERTIES = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{ISO8601}} %p %c: %m%n
"""


def spark_log_options(log_file: str) -> str:
    """JVM options sending the driver's log4j2 output to `log_file` (its configuration written beside it)."""
    log_file = os.path.abspath(log_file)
    os.makedirs(os.path.dirname(log_file), exist_ok=True)
    config = log_file + ".log4j2.properties"
    with open(config, "w") as f:
        f.write(LOG4J2_PROPERTIES.format(path=log_file))
    return f"-Dlog4j2.configurationFile=file:{config}"


def local_session(app_name: str = "lakelog-jobs", cores: str = "*", log_file: str | None = None) -> Any:
    """A quiet local SparkSession whose Python workers run this interpreter; Spark logs to `log_file`
    (default: the `spark_log_file` setting)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(f"local[{cores}]").appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # a progress bar on stderr would garble the server's log
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", spark_log_options(log_file or Settings().spark_log_file))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def cluster_session(app_name: str = "lakelog-jobs") -> Any:
    """The session spark-submit provides (master and resources come from the cluster)."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.appName(app_name).getOrCreate()
