"""`lakelog groups`, as kafka-consumer-groups.sh: list, describe (lag), delete, reset-offsets, on the
root's committed offsets (lakelog/platform/groups).
"""

from __future__ import annotations

import json

import typer

from lakelog.cli.common import OutputOption, fail, group_coordinator, output_format, print_table
from lakelog.platform.groups import admin as group_admin

groups_app = typer.Typer(
    help="Consumer groups, as kafka-consumer-groups.sh: list, describe, delete, reset-offsets. Works on the "
         "root's committed offsets; a running server's live members are only visible through its HTTP API "
         "(GET /v1/groups/{group}).",
    no_args_is_help=True)

MEMBERS_NOTE = ("committed offsets from storage; live members of a running server are only visible through "
                "its HTTP API: GET /v1/groups/{group}")


@groups_app.command("list")
def groups_list(output: str | None = OutputOption) -> None:
    """Groups with committed offsets, and the topics they committed."""
    with group_coordinator() as coordinator:
        groups = [(g, sorted({t for t, _ in coordinator.committed(g)})) for g in coordinator.group_ids()]
    if output_format(output) == "json":
        for group, topics in groups:
            typer.echo(json.dumps({"group": group, "topics": topics}))
        return
    print_table(["GROUP", "TOPICS"], [[g, ",".join(t)] for g, t in groups])


@groups_app.command("describe")
def groups_describe(group: str, output: str | None = OutputOption) -> None:
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


def parse_topic_partitions(values: list[str]) -> list[tuple[str, int | None]]:
    """--topic T (all partitions), T:P or T:P1,P2 (Kafka's form)."""
    named: list[tuple[str, int | None]] = []
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


def reset_spec(to_earliest: bool, to_latest: bool, to_datetime: str | None, to_offset: int | None,
               shift_by: int | None) -> group_admin.ResetSpec:
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
    to_datetime: str | None = typer.Option(None, "--to-datetime",
                                              help="ISO-8601, e.g. 2026-11-21T18:00:00 (UTC unless an offset "
                                                   "is given): the earliest offset at or after it"),
    to_offset: int | None = typer.Option(None, "--to-offset"),
    shift_by: int | None = typer.Option(None, "--shift-by", help="move the committed offsets by N (may be < 0)"),
    execute: bool = typer.Option(False, "--execute/--dry-run", help="commit the new offsets (default: dry run, "
                                                                      "print them only)"),
    output: str | None = OutputOption,
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
