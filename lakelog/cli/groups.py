"""`lakelog groups`, as kafka-consumer-groups.sh: list, describe (lag), delete, reset-offsets, on the
root's committed offsets (lakelog/platform/groups); share groups (KIP-932) are listed and described too, from
their state on the root (`_control/share_state`), with type "share". A consumer group's type ("classic" or
"consumer", KIP-848) is its live members', which only a running server knows: `--url` asks it.
"""

from __future__ import annotations

import json

import httpx
import typer

from lakelog.cli.common import OutputOption, broker, fail, group_coordinator, output_format, print_table
from lakelog.platform.delta.control_table import control_table_exists
from lakelog.platform.groups import admin as group_admin
from lakelog.platform.layout import SHARE_STATE_TABLE
from lakelog.platform.share.partition import SharePartition
from lakelog.platform.share.state_store import ShareStateStore

groups_app = typer.Typer(
    help="Consumer groups, as kafka-consumer-groups.sh: list, describe, delete, reset-offsets. Works on the "
         "root's committed offsets; a running server's live members are only visible through its HTTP API "
         "(GET /v1/groups/{group}).",
    no_args_is_help=True)

MEMBERS_NOTE = ("committed offsets from storage; live members of a running server are only visible through "
                "its HTTP API: GET /v1/groups/{group}")


def share_states() -> tuple[dict[str, dict[tuple[str, int], SharePartition]], set[str]]:
    """Share groups stored on the root: each group's share-partitions, and every share group's id (those with
    only configs too)."""
    with broker() as b:
        if not control_table_exists(b.storage, SHARE_STATE_TABLE):
            return {}, set()
        store = ShareStateStore(b.storage)
        try:
            partitions, configs = store.load()
        finally:
            store.close()
    states: dict[str, dict[tuple[str, int], SharePartition]] = {}
    for (group, topic, partition), state in partitions.items():
        states.setdefault(group, {})[(topic, partition)] = state
    return states, set(states) | set(configs)


LiveOption = typer.Option(None, "--url", envvar="LAKELOG_URL",
                          help="a running server: each group's type (classic or consumer) is its live members'")


def live_types(url: str | None) -> dict[str, str]:
    """The type of each group a running server coordinates (none without --url, or when it cannot answer)."""
    if not url:
        return {}
    try:
        answer = httpx.get(f"{url.rstrip('/')}/v1/groups", timeout=30)
        answer.raise_for_status()
    except httpx.HTTPError as exc:
        typer.echo(f"note: {url} did not answer ({exc}): group types unknown", err=True)
        return {}
    return {g["group"]: g["type"] for g in answer.json()["groups"]}


@groups_app.command("list")
def groups_list(output: str | None = OutputOption, url: str | None = LiveOption) -> None:
    """Groups with committed offsets and the topics they committed, and share groups (type "share") with
    the topics they read. With --url, each other group's type (classic or consumer) from the running server."""
    live = live_types(url)
    with group_coordinator() as coordinator:
        known = set(coordinator.group_ids())
        groups: list[tuple[str, str | None, list[str]]] = [
            (g, live.get(g), sorted({t for t, _ in coordinator.committed(g)})) for g in sorted(known)]
    groups += [(g, kind, []) for g, kind in sorted(live.items()) if g not in known]  # members, no commits yet
    states, shares = share_states()
    groups += [(g, "share", sorted({t for t, _ in states.get(g, {})})) for g in sorted(shares)]
    if output_format(output) == "json":
        for group, kind, topics in groups:
            typer.echo(json.dumps({"group": group, "type": kind, "topics": topics}))
        return
    print_table(["GROUP", "TYPE", "TOPICS"], [[g, k, ",".join(t)] for g, k, t in groups])


def share_describe(group: str, states: dict[tuple[str, int], SharePartition], output: str | None) -> None:
    """A share group from its stored state: per share-partition the start offset, the log end, the lag
    between them and the records in flight (members and locks: `lakelog share describe` on a server)."""
    with broker() as b:
        ends = {tp: b.list_offset(tp[0], tp[1], "latest") for tp in states}
    rows = [(t, p, s.start_offset, ends[(t, p)], max(ends[(t, p)] - s.start_offset, 0), len(s.in_flight()))
            for (t, p), s in sorted(states.items())]
    note = "stored state; members and locks of a running server: lakelog share describe " + group
    if output_format(output) == "json":
        typer.echo(json.dumps({"group": group, "type": "share", "partitions": [
            {"topic": t, "partition": p, "start_offset": s, "log_end_offset": e, "lag": lag, "in_flight": n}
            for t, p, s, e, lag, n in rows], "note": note}, indent=2))
        return
    print_table(["GROUP", "TYPE", "TOPIC", "PARTITION", "START-OFFSET", "LOG-END-OFFSET", "LAG", "IN-FLIGHT"],
                [[group, "share", *row] for row in rows])
    typer.echo(f"note: {note}", err=True)


@groups_app.command("describe")
def groups_describe(group: str, output: str | None = OutputOption, url: str | None = LiveOption) -> None:
    """Per partition: committed offset, log end offset, lag, and the consumer owning it on this node; for a
    share group, each share-partition's start offset, lag and records in flight. With --url, the group's type
    (classic or consumer) from the running server."""
    with group_coordinator() as coordinator:
        known = group in coordinator.group_ids()
        rows = coordinator.lag(group) if known else []
    if not known:
        states, shares = share_states()
        if group in shares:
            share_describe(group, states.get(group, {}), output)
            return
        with group_coordinator() as coordinator:
            rows = coordinator.lag(group)  # the unknown group's error, as before
    kind = live_types(url).get(group)
    if output_format(output) == "json":
        typer.echo(json.dumps({"group": group, "type": kind, "partitions": [
            {"topic": r.topic, "partition": r.partition, "current_offset": r.current_offset,
             "log_end_offset": r.log_end_offset, "lag": r.lag, "consumer_id": r.consumer_id} for r in rows],
            "note": MEMBERS_NOTE.format(group=group)}, indent=2))
        return
    print_table(["GROUP", "TYPE", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID"],
                [[group, kind or "-", r.topic, r.partition, r.current_offset, r.log_end_offset, r.lag, r.consumer_id]
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
