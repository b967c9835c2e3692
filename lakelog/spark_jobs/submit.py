"""spark-submit entry point of the maintenance jobs.

    spark-submit lakelog/spark_jobs/submit.py <retention|roll|compact|vacuum> --root URI [--topic T] [--dry-run]
        [--storage key=value ...]

Prints the job report as one JSON line; exit code 1 on an error. Storage
options also come from the environment (AWS_* as delta-rs reads them). The run
is recorded in `<root>/_control/job_runs` (trigger `spark-submit`).
"""

from __future__ import annotations

import argparse
import json
import sys

from lakelog.observability import configure_logging
from lakelog.platform import Broker
from lakelog.platform.errors import LakelogError
from lakelog.settings import Settings, own_journal
from lakelog.spark_jobs.jobs import JOBS, REPLICATION_JOB, run_recorded


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="lakelog-jobs", description="lakelog maintenance jobs on Spark")
    parser.add_argument("job", choices=(*JOBS, REPLICATION_JOB))
    parser.add_argument("--root", required=True, help="root URI: a folder or s3://bucket/prefix")
    parser.add_argument("--topic", action="append", default=None, help="a topic (repeatable); all when omitted")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    parser.add_argument("--storage", action="append", default=[], help="storage option key=value (repeatable)")
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--local", action="store_true", help="use a local SparkSession instead of the cluster's")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    configure_logging(args.log_level)
    storage = dict(pair.split("=", 1) for pair in args.storage)
    from lakelog.spark_jobs.session import cluster_session, local_session

    spark = local_session() if args.local else cluster_session(f"lakelog-{args.job}")
    settings = own_journal(Settings(root=args.root, storage=storage), "job")
    broker = Broker(settings)
    try:  # recorded for `GET /v1/jobs`, as the scheduler's runs are
        report = run_recorded(args.job, broker, spark, args.topic, args.dry_run, "spark-submit",
                              settings.job_runs_retention_ms)
    except LakelogError as exc:
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    finally:
        broker.close()
    print(json.dumps(report.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
