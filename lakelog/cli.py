"""The `lakelog` command: topics, produce, consume, serve, jobs.

Errors print one line (`error: CODE: message`) and exit 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Iterator, Optional

import typer

from lakelog.observability import configure_logging
from lakelog.platform import Broker, Record
from lakelog.platform.errors import LakelogError
from lakelog.platform.records import encode_bytes
from lakelog.platform.storage import STORAGE_ERRORS, Storage, describe_storage_error
from lakelog.settings import Settings

app = typer.Typer(help="lakelog: Kafka's log model stored as Delta Lake tables.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
topics_app = typer.Typer(help="Create, list, describe, alter and delete topics.", no_args_is_help=True)
app.add_typer(topics_app, name="topics")

PRODUCE_CHUNK = 1000


class State:
    root: Optional[str] = None
    log_level: str = "WARNING"


def settings(**overrides: object) -> Settings:
    values = {k: v for k, v in overrides.items() if v is not None}
    if State.root:
        values["root"] = State.root
    return Settings(**values)


def broker(create: bool = False) -> Broker:
    """Commands that only read (or change what exists) create no catalog: a wrong --root says so."""
    opened = Broker(settings(), create_catalog=create)
    if opened.catalog.created:
        typer.echo(f"created a lakelog catalog at {opened.storage.root}", err=True)
    return opened


def fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def parse_pairs(pairs: list[str]) -> dict[str, str]:
    config = {}
    for pair in pairs:
        if "=" not in pair:
            fail(f"--config takes key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        config[key.strip()] = value.strip()
    return config


@app.callback()
def main(
    root: Optional[str] = typer.Option(None, "--root", envvar="LAKELOG_ROOT",
                                       help="Root URI: a local folder (default ./data) or s3://bucket/prefix"),
    log_level: str = typer.Option("WARNING", "--log-level", envvar="LAKELOG_LOG_LEVEL"),
) -> None:
    State.root = root
    State.log_level = log_level
    configure_logging(log_level)


@topics_app.command("create")
def topics_create(
    name: str,
    partitions: int = typer.Option(1, "--partitions", "-p"),
    config: list[str] = typer.Option([], "--config", "-c", help="key=value, repeatable"),
) -> None:
    with broker(create=True) as b:
        meta = b.create_topic(name, partitions, parse_pairs(config))
    typer.echo(json.dumps({"name": meta.name, "partitions": meta.partitions}))


@topics_app.command("list")
def topics_list() -> None:
    with broker() as b:
        for meta in b.list_topics():
            typer.echo(json.dumps({"name": meta.name, "partitions": meta.partitions}))


@topics_app.command("describe")
def topics_describe(name: str) -> None:
    with broker() as b:
        description = b.describe_topic(name)
    typer.echo(json.dumps({
        "name": description.meta.name,
        "partitions": [
            {"partition": p.partition, "log_start_offset": p.log_start_offset,
             "log_end_offset": p.log_end_offset, "size_bytes": p.size_bytes}
            for p in description.partitions
        ],
        "config": description.meta.config.to_kafka(),
    }, indent=2))


@topics_app.command("alter")
def topics_alter(name: str, config: list[str] = typer.Option([], "--config", "-c")) -> None:
    with broker() as b:
        meta = b.alter_topic_config(name, parse_pairs(config))
    typer.echo(json.dumps({"name": meta.name, "config": meta.config.to_kafka()}))


@topics_app.command("add-partitions")
def topics_add_partitions(name: str, partitions: int = typer.Option(..., "--partitions", "-p")) -> None:
    with broker() as b:
        meta = b.add_partitions(name, partitions)
    typer.echo(json.dumps({"name": meta.name, "partitions": meta.partitions}))


@topics_app.command("delete")
def topics_delete(name: str) -> None:
    with broker() as b:
        b.delete_topic(name)
    typer.echo(json.dumps({"deleted": name}))


def _stdin_chunks(interactive: bool) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in sys.stdin:
        chunk.append(line.rstrip("\n").rstrip("\r"))
        if interactive or len(chunk) >= PRODUCE_CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@app.command()
def produce(
    topic: str,
    key_separator: Optional[str] = typer.Option(None, "--key-separator", help="Lines are key<SEP>value"),
    partition: Optional[int] = typer.Option(None, "--partition"),
    acks: str = typer.Option("1", "--acks", help="0, 1 or all"),
) -> None:
    """Produce one record per stdin line; print {"partition", "offset"} per record."""
    with broker() as b:
        b.topic(topic)  # unknown topic: fail before reading stdin
        for lines in _stdin_chunks(sys.stdin.isatty()):
            records = []
            for line in lines:
                key: Optional[bytes] = None
                value = line
                if key_separator is not None:
                    if key_separator not in line:
                        fail(f"line has no key separator {key_separator!r}: {line[:80]!r}")
                    raw_key, value = line.split(key_separator, 1)
                    key = raw_key.encode()
                records.append(Record(value.encode(), key=key, partition=partition))
            result = b.produce(topic, records, acks=acks)
            sys.stdout.write("".join(
                json.dumps({"partition": p, "offset": o}) + "\n" for p, o, _ in result.records()))
            sys.stdout.flush()


def _record_json(topic: str, record: object) -> str:
    key, key_b64 = encode_bytes(record.key)  # type: ignore[attr-defined]
    value, value_b64 = encode_bytes(record.value)  # type: ignore[attr-defined]
    entry = {"topic": topic, "partition": record.partition, "offset": record.offset,  # type: ignore[attr-defined]
             "timestamp": record.timestamp_ms, "key": key, "value": value}  # type: ignore[attr-defined]
    if key_b64:
        entry["key_encoding"] = "base64"
    if value_b64:
        entry["value_encoding"] = "base64"
    return json.dumps(entry)


@app.command()
def consume(
    topic: str,
    partition: Optional[int] = typer.Option(None, "--partition"),
    start: str = typer.Option("earliest", "--from", help="earliest, latest or an offset"),
    max_records: Optional[int] = typer.Option(None, "--max"),
    follow: bool = typer.Option(False, "--follow", help="Keep waiting for new records"),
) -> None:
    """Print one JSON line per record (key/value UTF-8 where valid, else base64 with a flag)."""
    with broker() as b:
        meta = b.topic(topic)
        partitions = [partition] if partition is not None else list(range(meta.partitions))
        positions = {}
        for p in partitions:
            if start in ("earliest", "latest"):
                positions[p] = b.list_offset(topic, p, start)
            else:
                try:
                    positions[p] = int(start)
                except ValueError:
                    fail(f"--from takes earliest, latest or an offset, got {start!r}")
                b.check_offset(topic, p, positions[p])
        ends = {p: b.list_offset(topic, p, "latest") for p in partitions}
        printed = 0
        while True:
            progressed = False
            for p in partitions:
                if not follow and positions[p] >= ends[p]:
                    continue
                want = 500 if max_records is None else min(500, max_records - printed)
                result = b.fetch(topic, p, positions[p], max_records=want)
                for record in result:
                    sys.stdout.write(_record_json(topic, record) + "\n")
                    printed += 1
                if result.next_offset is not None:
                    positions[p] = result.next_offset
                    progressed = True
                if max_records is not None and printed >= max_records:
                    sys.stdout.flush()
                    return
            sys.stdout.flush()
            if not progressed:
                if not follow:
                    return
                time.sleep(0.2)


@app.command()
def serve(
    host: Optional[str] = typer.Option(None, "--host", help="Address to listen on (LAKELOG_HOST; default 127.0.0.1)"),
    port: Optional[int] = typer.Option(None, "--port", help="Port (LAKELOG_PORT; default 8080)"),
    insecure: bool = typer.Option(False, "--insecure",
                                  help="Allow a non-loopback address without authentication"),
    access_log: bool = typer.Option(False, "--access-log", help="Log one line per request (LAKELOG_ACCESS_LOG)"),
    jobs: bool = typer.Option(True, "--jobs/--no-jobs",
                              help="Run retention, roll, compaction and vacuum every LAKELOG_JOBS_INTERVAL_S "
                                   "seconds in a separate process (local Spark)"),
) -> None:
    """Run the HTTP ingest tier (produce, fetch, consumer groups, admin) until SIGINT/SIGTERM."""
    from lakelog.ingest_api.server import RefusedToStart, serve as run_server

    config = settings(host=host, port=port, insecure=insecure or None, access_log=access_log or None)
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


# ---- jobs (lakelog/spark_jobs) ---------------------------------------------------

jobs_app = typer.Typer(help="Maintenance jobs on local Spark: retention, roll, compact, vacuum.",
                       no_args_is_help=True)
app.add_typer(jobs_app, name="jobs")


def _run_job(job: str, topic: Optional[list[str]], dry_run: bool) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from lakelog.spark_jobs.jobs import run_job
    from lakelog.spark_jobs.session import local_session

    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task(f"{job}: starting local Spark", total=None)
        spark = None if job in ("retention", "vacuum") or dry_run else local_session(f"lakelog-{job}")
        progress.update(task, description=f"{job}: planning")

        def step(message: str, done: int, total: int) -> None:
            progress.update(task, description=message, completed=done, total=total)

        with broker() as b:
            report = run_job(job, b, spark, topic or None, dry_run, progress=step)
    for plan in report.plans:
        console.print(f"[bold]{plan.topic}[/bold]-{plan.partition}: {plan.description}" if plan.partition >= 0
                      else f"[bold]{plan.topic}[/bold]: {plan.description}")
    if not report.plans:
        console.print(f"{job}: nothing to do")
    summary = report.to_dict()
    summary.pop("plans")
    typer.echo(json.dumps(summary))


def _job_command(job: str, help_text: str) -> None:
    @jobs_app.command(job, help=help_text)
    def command(topic: Optional[list[str]] = typer.Option(None, "--topic", "-t", help="repeatable; all when omitted"),
                dry_run: bool = typer.Option(False, "--dry-run", help="print the plan, change nothing")) -> None:
        _run_job(job, topic, dry_run)


_job_command("retention", "Remove closed segments past retention.ms / retention.bytes / retention.topic.bytes.")
_job_command("roll", "Merge small files into segments of about segment.bytes (dataChange=false).")
_job_command("compact", "Keep the latest record per key in closed segments of compacted topics.")
_job_command("vacuum", "Delete files removed from the table longer ago than file.delete.delay.ms.")
_job_command("replicate", "Copy missing commits and files to every follower site, in version order (needs sites).")


admin_app = typer.Typer(help="Replication admin: leader election and replica lag.", no_args_is_help=True)
app.add_typer(admin_app, name="admin")


@admin_app.command("elect-leader")
def admin_elect_leader(
    topic: str,
    site: Optional[str] = typer.Option(None, "--site", help="the site to promote (default: an in-sync follower)"),
    unclean: bool = typer.Option(False, "--unclean", help="promote an out-of-sync replica, losing what it lacks"),
) -> None:
    """Move a topic's leadership to another site: clean (in-sync only) unless --unclean."""
    with broker() as b:
        election = b.elect_leader(topic, site, unclean)
    if election.warning:
        typer.echo(f"warning: {election.warning}", err=True)
    state = election.state
    typer.echo(json.dumps({"topic": topic, "leader": state.leader, "leader_epoch": state.leader_epoch,
                           "isr": list(state.isr), "previous_leader": election.previous.leader}))


@admin_app.command("replicas")
def admin_replicas(topic: str) -> None:
    """Replica placement, leader, in-sync set and each follower's lag in commits and per partition."""
    with broker() as b:
        report = b.replica_report(topic)
    typer.echo(json.dumps(report, indent=2))


def run() -> None:
    """Console entry point: typed errors become one line and exit code 1."""
    try:
        app(standalone_mode=True)
    except LakelogError as exc:
        typer.echo(f"error: {exc.code}: {exc.message}", err=True)
        sys.exit(1)
    except STORAGE_ERRORS as exc:  # the store failed after opening: still one line naming root and cause
        config = settings()
        cause = describe_storage_error(Storage.open(config.root, config.storage), exc)
        typer.echo(f"error: KAFKA_STORAGE_ERROR: {cause}", err=True)
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    run()
