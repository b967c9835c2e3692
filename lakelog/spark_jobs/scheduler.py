"""The jobs on a schedule, in their own process: `python -m lakelog.spark_jobs.scheduler --root URI --interval-s N`.

Storage options (credentials included) come from the environment (`LAKELOG_STORAGE`, JSON), as for
`lakelog serve`, so that no secret shows on a command line.

`lakelog serve` starts this as a separate process so the API never stalls on
Spark. Each round runs retention, roll, compact and vacuum over all topics
with one local SparkSession kept for the life of the process, then
journal-sweep over the root's journal generations (no Spark); a failing job
is logged and the next round tries again. SIGTERM/SIGINT stop it between jobs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time

from lakelog.observability import configure_logging
from lakelog.platform import Broker
from lakelog.platform.ops.job_runs import DEFAULT_RETENTION_MS, JobRun, record_runs
from lakelog.settings import Settings, own_journal
from lakelog.spark_jobs.jobs import JOBS, job_run, run_job

log = logging.getLogger("lakelog.spark_jobs.scheduler")


def run_round(broker: Broker, spark: object, stop: threading.Event,
              retention_ms: int = DEFAULT_RETENTION_MS) -> None:
    """Each job in turn; what each run did is recorded under the root for `GET /v1/jobs` (one file per round,
    the runs past `retention_ms` dropped)."""
    runs = []
    for job in JOBS:
        if stop.is_set():
            break
        started = time.time()
        try:
            report = run_job(job, broker, spark)
            log.info("scheduled job done", extra={"fields": {"job": job, "commits": report.commits,
                                                            "files_deleted": report.files_deleted,
                                                            "seconds": round(report.seconds, 3)}})
            runs.append(job_run(report, started))
        except Exception:  # one bad round must not end the schedule
            log.exception("scheduled job %s failed", job)
            runs.append(JobRun(job, "", int(started * 1000), time.time() - started, ok=False))
    try:
        record_runs(broker.storage, runs, retention_ms)
    except Exception:  # the record is for the console: never a reason to stop
        log.exception("could not record the round's job runs")


def _stop_with_parent(parent: int, stop: threading.Event) -> None:
    """A server killed with SIGKILL cannot stop us: notice that it is gone and stop."""
    while not stop.wait(1.0):
        if os.getppid() != parent:
            stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lakelog-scheduler")
    parser.add_argument("--root", required=True)
    parser.add_argument("--interval-s", type=float, default=300.0)
    parser.add_argument("--rounds", type=int, default=0, help="stop after this many rounds (0 = run until stopped)")
    parser.add_argument("--first-delay-s", type=float, default=None,
                        help="wait before the first round (default: one interval), so a short-lived server never "
                             "starts Spark")
    parser.add_argument("--parent-pid", type=int, default=None, help="stop when this process is gone")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.interval_s <= 0:
        parser.error("--interval-s must be > 0")
    configure_logging(args.log_level)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    parent = args.parent_pid or os.getppid()
    threading.Thread(target=_stop_with_parent, args=(parent, stop), daemon=True).start()
    if stop.wait(args.interval_s if args.first_delay_s is None else args.first_delay_s):
        return 0
    from lakelog.spark_jobs.session import local_session

    spark = local_session("lakelog-scheduler", cores="2")
    settings = own_journal(Settings(root=args.root), "job")  # storage options from LAKELOG_STORAGE, never argv
    broker = Broker(settings)
    rounds = 0
    try:
        while not stop.is_set():
            run_round(broker, spark, stop, settings.job_runs_retention_ms)
            rounds += 1
            if args.rounds and rounds >= args.rounds:
                break
            stop.wait(args.interval_s)
    finally:
        broker.close()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
