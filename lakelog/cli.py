"""The `lakelog` command: topics, groups, produce, consume, serve, jobs.

Errors print one line (`error: CODE: message`) and exit 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

import typer

from lakelog.observability import configure_logging
from lakelog.platform import Broker, Record
from lakelog.platform.errors import LakelogError
from lakelog.platform.groups import GroupCoordinator
from lakelog.platform.groups import admin as group_admin
from lakelog.platform.groups import positions as group_positions
from lakelog.platform.groups.membership import check_group_id
from lakelog.platform.records import ConsumerRecord, TopicPartition, encode_bytes
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


OUTPUT_FORMATS = ("table", "json")
OutputOption = typer.Option(None, "--output", "-o",
                            help="table or json (default: table on a terminal, json otherwise)")


def output_format(value: Optional[str]) -> str:
    """The format asked for, else an aligned table on a terminal and JSON when piped."""
    if value is None:
        return "table" if sys.stdout.isatty() else "json"
    if value not in OUTPUT_FORMATS:
        fail(f"--output takes table or json, got {value!r}")
    return value


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Kafka-tool style: upper-case headers, aligned columns, '-' where there is no value."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in columns:
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    console = Console(width=10_000, height=100)  # never truncate a cell (a dumb terminal would mean 80)
    with console.capture() as captured:
        console.print(table)
    typer.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


@contextmanager
def group_coordinator() -> Iterator[GroupCoordinator]:
    """A coordinator on this process's broker: the committed offsets in storage, and no members (a
    running server's members live in its memory)."""
    with broker() as b:
        coordinator = GroupCoordinator(b, initial_rebalance_delay_ms=0)
        try:
            yield coordinator
        finally:
            coordinator.close()


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
def topics_list(output: Optional[str] = OutputOption) -> None:
    """One line per topic (JSON lines with --output json)."""
    with broker() as b:
        topics = b.list_topics()
    if output_format(output) == "json":
        for meta in topics:
            typer.echo(json.dumps({"name": meta.name, "partitions": meta.partitions}))
        return
    print_table(["TOPIC", "PARTITIONS"], [[m.name, m.partitions] for m in topics])


def _replication(b: Broker, name: str) -> Optional[dict]:
    """The topic's replica report when it is replicated across sites, else None."""
    if b.replicas is None or b.replicas.state(name, refresh=True) is None:
        return None
    return b.replica_report(name)


def _topic_description(b: Broker, name: str) -> dict:
    description = b.describe_topic(name)
    replication = _replication(b, name)
    partitions = []
    for p in description.partitions:
        entry: dict[str, Any] = {"partition": p.partition, "log_start_offset": p.log_start_offset,
                                 "log_end_offset": p.log_end_offset, "size_bytes": p.size_bytes}
        if replication is not None:
            entry.update(leader=replication["leader"], replicas=replication["replicas"], isr=replication["isr"])
        partitions.append(entry)
    result: dict[str, Any] = {"name": description.meta.name, "partitions": partitions,
                              "config": description.meta.config.to_kafka()}
    if replication is not None:
        result["replication"] = {k: replication[k] for k in ("leader", "leader_epoch", "replicas", "isr",
                                                              "followers")}
    return result


@topics_app.command("describe")
def topics_describe(name: str, output: Optional[str] = OutputOption) -> None:
    """Partitions (log start/end offsets, size; leader, replicas, in-sync set when replicated) and config."""
    with broker() as b:
        result = _topic_description(b, name)
    if output_format(output) == "json":
        typer.echo(json.dumps(result, indent=2))
        return
    replicated = "replication" in result
    columns = ["TOPIC", "PARTITION", "LOG-START-OFFSET", "LOG-END-OFFSET", "SIZE-BYTES"]
    if replicated:
        columns += ["LEADER", "REPLICAS", "ISR"]
    rows = []
    for p in result["partitions"]:
        row = [name, p["partition"], p["log_start_offset"], p["log_end_offset"], p["size_bytes"]]
        if replicated:
            row += [p["leader"], ",".join(p["replicas"]), ",".join(p["isr"])]
        rows.append(row)
    print_table(columns, rows)
    typer.echo("Configs: " + ",".join(f"{k}={v}" for k, v in sorted(result["config"].items())))


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


def parse_headers(pairs: list[str]) -> list[tuple[str, bytes]]:
    headers = []
    for pair in pairs:
        if "=" not in pair:
            fail(f"--header takes key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        headers.append((key, value.encode()))
    return headers


@app.command()
def produce(
    topic: str,
    key_separator: Optional[str] = typer.Option(None, "--key-separator", help="Lines are key<SEP>value"),
    partition: Optional[int] = typer.Option(None, "--partition"),
    acks: str = typer.Option("1", "--acks", help="0, 1 or all"),
    header: list[str] = typer.Option([], "--header", "-H", help="key=value added to every record, repeatable"),
) -> None:
    """Produce one record per stdin line; print {"partition", "offset"} per record."""
    headers = parse_headers(header) or None
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
                records.append(Record(value.encode(), key=key, partition=partition, headers=headers))
            result = b.produce(topic, records, acks=acks)
            sys.stdout.write("".join(
                json.dumps({"partition": p, "offset": o}) + "\n" for p, o, _ in result.records()))
            sys.stdout.flush()


def _header_json(key: str, value: Optional[bytes]) -> dict:
    text, b64 = encode_bytes(value)
    entry: dict[str, Any] = {"key": key, "value": text}
    if b64:
        entry["value_encoding"] = "base64"
    return entry


def _record_json(topic: str, record: ConsumerRecord) -> str:
    key, key_b64 = encode_bytes(record.key)
    value, value_b64 = encode_bytes(record.value)
    entry: dict[str, Any] = {"topic": topic, "partition": record.partition, "offset": record.offset,
                             "timestamp": record.timestamp_ms, "key": key, "value": value,
                             "headers": [_header_json(k, v) for k, v in record.headers]}
    if key_b64:
        entry["key_encoding"] = "base64"
    if value_b64:
        entry["value_encoding"] = "base64"
    return json.dumps(entry)


def _start_positions(b: Broker, topic: str, partitions: list[int], start: str) -> dict[int, int]:
    """Where a consumer without a group starts: earliest, latest or an offset."""
    found = {}
    for p in partitions:
        if start in ("earliest", "latest"):
            found[p] = b.list_offset(topic, p, start)
            continue
        try:
            found[p] = int(start)
        except ValueError:
            fail(f"--from takes earliest, latest or an offset, got {start!r}")
        b.check_offset(topic, p, found[p])
    return found


def _group_positions(b: Broker, coordinator: GroupCoordinator, group: str, topic: str, partitions: list[int],
                     reset: str) -> dict[int, int]:
    """Where a group member starts: the committed offset, else where auto.offset.reset says."""
    committed = coordinator.committed(group) if group in coordinator.group_ids() else {}
    return {p: group_positions.initial_position(b, (topic, p), committed.get((topic, p)), reset)
            for p in partitions}


class Committer:
    """consume --group: commits the next offset of each partition read (Kafka's commitSync), so a later
    consume of the group resumes after what was printed."""

    def __init__(self, coordinator: Optional[GroupCoordinator], group: Optional[str],
                 start: Optional[dict[TopicPartition, int]] = None) -> None:
        self.coordinator, self.group = coordinator, group
        self.pending: dict[TopicPartition, int] = dict(start or {})  # positions reached, not committed yet

    def read(self, tp: TopicPartition, next_offset: int) -> None:
        if self.coordinator is not None:
            self.pending[tp] = next_offset

    def commit(self) -> None:
        if self.coordinator is None or self.group is None or not self.pending:
            return
        rows = [(t, p, o, None) for (t, p), o in sorted(self.pending.items())]
        self.pending = {}
        self.coordinator.commit(self.group, None, -1, rows).result()


def _consume_loop(b: Broker, topic: str, positions: dict[int, int], max_records: Optional[int], follow: bool,
                  committer: Committer) -> None:
    ends = {p: b.list_offset(topic, p, "latest") for p in positions}
    printed = 0
    while True:
        progressed = False
        for p in positions:
            if not follow and positions[p] >= ends[p]:
                continue
            want = 500 if max_records is None else min(500, max_records - printed)
            result = b.fetch(topic, p, positions[p], max_records=want)
            for record in result:
                sys.stdout.write(_record_json(topic, record) + "\n")
                printed += 1
            if result.next_offset is not None:
                positions[p] = result.next_offset
                committer.read((topic, p), result.next_offset)
                progressed = True
            if max_records is not None and printed >= max_records:
                sys.stdout.flush()
                committer.commit()
                return
        sys.stdout.flush()
        committer.commit()
        if not progressed:
            if not follow:
                return
            time.sleep(0.2)


@app.command()
def consume(
    topic: str,
    partition: Optional[int] = typer.Option(None, "--partition"),
    start: Optional[str] = typer.Option(None, "--from", help="earliest (default), latest or an offset; "
                                                             "not with --group"),
    max_records: Optional[int] = typer.Option(None, "--max"),
    follow: bool = typer.Option(False, "--follow", help="Keep waiting for new records"),
    group: Optional[str] = typer.Option(None, "--group", "-g",
                                        help="Start from the group's committed offsets and commit as records "
                                             "are printed"),
    auto_offset_reset: str = typer.Option("latest", "--auto-offset-reset",
                                          help="With --group, for partitions without a committed offset: "
                                               "earliest, latest or none (Kafka's auto.offset.reset)"),
) -> None:
    """Print one JSON line per record (key/value/headers UTF-8 where valid, else base64 with a flag)."""
    if group is not None:
        if start is not None:
            fail("--from does not go with --group: the group's committed offsets say where to start "
                 "(see `lakelog groups reset-offsets`)")
        if auto_offset_reset not in ("earliest", "latest", "none"):
            fail(f"--auto-offset-reset takes earliest, latest or none, got {auto_offset_reset!r}")
        check_group_id(group)
    with broker() as b:
        meta = b.topic(topic)
        partitions = [partition] if partition is not None else list(range(meta.partitions))
        if group is None:
            _consume_loop(b, topic, _start_positions(b, topic, partitions, start or "earliest"), max_records,
                          follow, Committer(None, None))
            return
        coordinator = GroupCoordinator(b, initial_rebalance_delay_ms=0)
        try:
            positions = _group_positions(b, coordinator, group, topic, partitions, auto_offset_reset)
            start = {(topic, p): o for p, o in positions.items()}  # every partition read is the group's
            _consume_loop(b, topic, positions, max_records, follow, Committer(coordinator, group, start))
        finally:
            coordinator.close()


@app.command()
def serve(
    host: Optional[str] = typer.Option(None, "--host", help="Address to listen on (LAKELOG_HOST; default 127.0.0.1)"),
    port: Optional[int] = typer.Option(None, "--port", help="Port (LAKELOG_PORT; default 8080)"),
    insecure: bool = typer.Option(False, "--insecure",
                                  help="Allow a non-loopback address without authentication"),
    access_log: bool = typer.Option(False, "--access-log", help="Log one line per request (LAKELOG_ACCESS_LOG)"),
    advertise: Optional[str] = typer.Option(None, "--advertise",
                                            help="URL the other nodes of the cluster reach this one at "
                                                 "(LAKELOG_ADVERTISE; default http://host:port)"),
    node_id: Optional[str] = typer.Option(None, "--node-id", help="This node's id in the cluster "
                                                                   "(LAKELOG_NODE_ID; default from its address)"),
    kafka_port: Optional[int] = typer.Option(None, "--kafka-port",
                                             help="Kafka listener port (LAKELOG_KAFKA_PORT; default 9092, "
                                                  "0 any free port, -1 off)"),
    kafka_advertise: Optional[str] = typer.Option(None, "--kafka-advertise",
                                                  help="host:port Kafka clients reach this node at "
                                                       "(LAKELOG_KAFKA_ADVERTISE)"),
    jobs: bool = typer.Option(True, "--jobs/--no-jobs",
                              help="Run retention, roll, compaction and vacuum every LAKELOG_JOBS_INTERVAL_S "
                                   "seconds in a separate process (local Spark)"),
) -> None:
    """Run the HTTP tier and the Kafka listener (produce, fetch, consumer groups, admin) until SIGINT/SIGTERM."""
    from lakelog.ingest_api.server import RefusedToStart, serve as run_server

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


# ---- consumer groups (lakelog/platform/groups) ------------------------------------

groups_app = typer.Typer(
    help="Consumer groups, as kafka-consumer-groups.sh: list, describe, delete, reset-offsets. Works on the "
         "root's committed offsets; a running server's live members are only visible through its HTTP API "
         "(GET /v1/groups/{group}).",
    no_args_is_help=True)
app.add_typer(groups_app, name="groups")

MEMBERS_NOTE = ("committed offsets from storage; live members of a running server are only visible through "
                "its HTTP API: GET /v1/groups/{group}")


@groups_app.command("list")
def groups_list(output: Optional[str] = OutputOption) -> None:
    """Groups with committed offsets, and the topics they committed."""
    with group_coordinator() as coordinator:
        groups = [(g, sorted({t for t, _ in coordinator.committed(g)})) for g in coordinator.group_ids()]
    if output_format(output) == "json":
        for group, topics in groups:
            typer.echo(json.dumps({"group": group, "topics": topics}))
        return
    print_table(["GROUP", "TOPICS"], [[g, ",".join(t)] for g, t in groups])


@groups_app.command("describe")
def groups_describe(group: str, output: Optional[str] = OutputOption) -> None:
    """Per partition: committed offset, log end offset, lag, and the consumer owning it on this node."""
    with group_coordinator() as coordinator:
        rows = coordinator.lag(group)
    if output_format(output) == "json":
        typer.echo(json.dumps({"group": group, "partitions": [
            {"topic": r.topic, "partition": r.partition, "current_offset": r.current_offset,
             "log_end_offset": r.log_end_offset, "lag": r.lag, "consumer_id": r.consumer_id} for r in rows],
            "note": MEMBERS_NOTE.format(group=group)}, indent=2))
        return
    print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID"],
                [[group, r.topic, r.partition, r.current_offset, r.log_end_offset, r.lag, r.consumer_id]
                 for r in rows])
    typer.echo(f"note: {MEMBERS_NOTE.format(group=group)}", err=True)


@groups_app.command("delete")
def groups_delete(group: str) -> None:
    """Delete an empty group's committed offsets (refused with NON_EMPTY_GROUP when it has members here;
    stop the group's consumers first: a running server's members are not visible from the CLI)."""
    with group_coordinator() as coordinator:
        coordinator.delete_group(group)
    typer.echo(json.dumps({"deleted": group}))


def parse_topic_partitions(values: list[str]) -> list[tuple[str, Optional[int]]]:
    """--topic T (all partitions), T:P or T:P1,P2 (Kafka's form)."""
    named: list[tuple[str, Optional[int]]] = []
    for value in values:
        topic, _, parts = value.partition(":")
        if not parts:
            named.append((topic, None))
            continue
        try:
            named.extend((topic, int(p)) for p in parts.split(","))
        except ValueError:
            fail(f"--topic takes TOPIC or TOPIC:PARTITION[,PARTITION...], got {value!r}")
    return named


def reset_spec(to_earliest: bool, to_latest: bool, to_datetime: Optional[str], to_offset: Optional[int],
               shift_by: Optional[int]) -> group_admin.ResetSpec:
    chosen = [name for name, given in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                        ("--to-datetime", to_datetime is not None),
                                        ("--to-offset", to_offset is not None),
                                        ("--shift-by", shift_by is not None)) if given]
    if len(chosen) != 1:
        fail("give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by"
             + (f" (got {', '.join(chosen)})" if chosen else ""))
    if to_earliest:
        return group_admin.ResetSpec("earliest")
    if to_latest:
        return group_admin.ResetSpec("latest")
    if to_datetime is not None:
        return group_admin.ResetSpec("timestamp", group_admin.datetime_ms(to_datetime))
    if to_offset is not None:
        return group_admin.ResetSpec("offset", to_offset)
    return group_admin.ResetSpec("shift", shift_by)


@groups_app.command("reset-offsets")
def groups_reset_offsets(
    group: str,
    topic: list[str] = typer.Option([], "--topic", "-t", help="TOPIC or TOPIC:PARTITION[,PARTITION], repeatable"),
    all_topics: bool = typer.Option(False, "--all-topics", help="every topic the group committed"),
    to_earliest: bool = typer.Option(False, "--to-earliest"),
    to_latest: bool = typer.Option(False, "--to-latest"),
    to_datetime: Optional[str] = typer.Option(None, "--to-datetime",
                                              help="ISO-8601, e.g. 2026-11-21T18:00:00 (UTC unless an offset "
                                                   "is given): the earliest offset at or after it"),
    to_offset: Optional[int] = typer.Option(None, "--to-offset"),
    shift_by: Optional[int] = typer.Option(None, "--shift-by", help="move the committed offsets by N (may be < 0)"),
    execute: bool = typer.Option(False, "--execute/--dry-run", help="commit the new offsets (default: dry run, "
                                                                      "print them only)"),
    output: Optional[str] = OutputOption,
) -> None:
    """Move an empty group's committed offsets; targets are clamped to [log start, log end] as in Kafka."""
    spec = reset_spec(to_earliest, to_latest, to_datetime, to_offset, shift_by)
    if bool(topic) == all_topics:
        fail("give --topic (repeatable) or --all-topics")
    named = None if all_topics else parse_topic_partitions(topic)
    with group_coordinator() as coordinator:
        plan = coordinator.plan_reset(group, spec, named)
        if execute:
            coordinator.execute_reset(group, plan).result()
    if output_format(output) == "json":
        typer.echo(json.dumps({"group": group, "executed": execute, "partitions": [
            {"topic": r.topic, "partition": r.partition, "current_offset": r.current, "new_offset": r.target}
            for r in plan]}, indent=2))
        return
    print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                [[group, r.topic, r.partition, r.current, r.target] for r in plan])
    if not execute:
        typer.echo("dry run: nothing changed; add --execute to commit these offsets", err=True)


# ---- jobs (lakelog/spark_jobs) ---------------------------------------------------

jobs_app = typer.Typer(help="Maintenance jobs on local Spark: retention, roll, compact, vacuum.",
                       no_args_is_help=True)
app.add_typer(jobs_app, name="jobs")


def _run_job(job: str, topic: Optional[list[str]], dry_run: bool) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from lakelog.spark_jobs.jobs import run_recorded
    from lakelog.spark_jobs.session import local_session

    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task(f"{job}: starting local Spark", total=None)
        spark = None if job in ("retention", "vacuum") or dry_run else local_session(f"lakelog-{job}")
        progress.update(task, description=f"{job}: planning")

        def step(message: str, done: int, total: int) -> None:
            progress.update(task, description=message, completed=done, total=total)

        with broker() as b:  # the run is recorded for `GET /v1/jobs` as the scheduler's are (a dry run is not)
            report = run_recorded(job, b, spark, topic or None, dry_run, "cli",
                                  settings().job_runs_retention_ms, progress=step)
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
