"""Spark's own log4j output goes to its file, not to stderr where the server's JSON log is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

SESSION = """
import sys
from lakelog.spark_jobs.session import local_session
spark = local_session("log-test", "1", sys.argv[1])
print(spark.range(5).count())
spark.stop()
"""


def test_spark_logs_to_its_file(tmp_path: Path) -> None:
    log_file = tmp_path / "spark" / "spark.log"
    run = subprocess.run([sys.executable, "-c", SESSION, str(log_file)], capture_output=True, text=True,
                         timeout=230)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "5"
    # The JVM's own notice about incubator modules is printed by java itself, before any logging starts.
    assert [line for line in run.stderr.splitlines() if "incubator modules" not in line] == []
    assert " WARN " in log_file.read_text()  # Spark's start-up warnings landed in the file
