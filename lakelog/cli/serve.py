"""`lakelog serve`: the HTTP tier and the Kafka listener in this process, the maintenance jobs'
scheduler in a child process beside them.

A top-level command: `lakelog/cli/__init__.py` registers it on the app.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import typer

from lakelog.cli.common import State, fail, settings
from lakelog.settings import Settings


def serve(
    host: str | None = typer.Option(None, "--host", help="Address to listen on (LAKELOG_HOST; default 127.0.0.1)"),
    port: int | None = typer.Option(None, "--port", help="Port (LAKELOG_PORT; default 8080)"),
    insecure: bool = typer.Option(False, "--insecure",
                                  help="Allow a non-loopback address without authentication"),
    access_log: bool = typer.Option(False, "--access-log", help="Log one line per request (LAKELOG_ACCESS_LOG)"),
    advertise: str | None = typer.Option(None, "--advertise",
                                            help="URL the other nodes of the cluster reach this one at "
                                                 "(LAKELOG_ADVERTISE; default http://host:port)"),
    node_id: str | None = typer.Option(None, "--node-id", help="This node's id in the cluster "
                                                                   "(LAKELOG_NODE_ID; default from its address)"),
    kafka_port: int | None = typer.Option(None, "--kafka-port",
                                             help="Kafka listener port (LAKELOG_KAFKA_PORT; default 9092, "
                                                  "0 any free port, -1 off)"),
    kafka_advertise: str | None = typer.Option(None, "--kafka-advertise",
                                                  help="host:port Kafka clients reach this node at "
                                                       "(LAKELOG_KAFKA_ADVERTISE)"),
    jobs: bool = typer.Option(True, "--jobs/--no-jobs",
                              help="Run retention, roll, compaction and vacuum every LAKELOG_JOBS_INTERVAL_S "
                                   "seconds in a separate process (local Spark)"),
) -> None:
    """Run the HTTP tier and the Kafka listener (produce, fetch, consumer groups, admin) until SIGINT/SIGTERM."""
    from lakelog.ingest_api.server import RefusedToStart
    from lakelog.ingest_api.server import serve as run_server

    config = settings(host=host, port=port, insecure=insecure or None, access_log=access_log or None,
                      advertise=advertise, node_id=node_id, kafka_port=kafka_port, kafka_advertise=kafka_advertise)
    scheduler = _start_job_scheduler(config) if jobs and config.jobs_interval_s > 0 else None
    try:
        run_server(config, State.log_level)
    except RefusedToStart as exc:
        fail(str(exc))
    finally:
        if scheduler is not None:
            scheduler.terminate()
            try:
                scheduler.wait(30)
            except subprocess.TimeoutExpired:
                scheduler.kill()


def _start_job_scheduler(config: Settings) -> subprocess.Popen:
    """The maintenance jobs on a schedule, in their own process, so the API never stalls on Spark."""
    command = [sys.executable, "-m", "lakelog.spark_jobs.scheduler", "--root", config.root,
               "--interval-s", str(config.jobs_interval_s), "--log-level", State.log_level,
               "--parent-pid", str(os.getpid())]
    # Storage options (credentials among them) go through the environment: a command line is visible to `ps`.
    env = {**os.environ, "LAKELOG_STORAGE": json.dumps(config.storage)}
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, env=env)
