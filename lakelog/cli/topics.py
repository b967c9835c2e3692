"""`lakelog topics`: create, list, describe (with the replica report when replicated), alter,
add-partitions, delete, repair (records another Delta writer appended beyond the log end).
"""

from __future__ import annotations

import json
from typing import Any

import typer

from lakelog.cli.common import OutputOption, broker, output_format, parse_pairs, print_table
from lakelog.platform import Broker

topics_app = typer.Typer(help="Create, list, describe, alter, delete and repair topics.", no_args_is_help=True)


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
def topics_list(output: str | None = OutputOption) -> None:
    """One line per topic (JSON lines with --output json)."""
    with broker() as b:
        topics = b.list_topics()
    if output_format(output) == "json":
        for meta in topics:
            typer.echo(json.dumps({"name": meta.name, "partitions": meta.partitions}))
        return
    print_table(["TOPIC", "PARTITIONS"], [[m.name, m.partitions] for m in topics])


def _replication(b: Broker, name: str) -> dict | None:
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
def topics_describe(name: str, output: str | None = OutputOption) -> None:
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
    typer.echo("Configs: " + ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"  # Kafka's true/false
                                      for k, v in sorted(result["config"].items())))


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


@topics_app.command("repair")
def topics_repair(name: str, output: str | None = OutputOption) -> None:
    """Remove, in one Delta commit, the records another Delta writer appended beyond the partitions' log
    ends (refused as DATA_CHANGED_OUTSIDE_LAKELOG); every running node serves the partitions again, no
    restart. Any other outside change is refused with nothing removed."""
    with broker() as b:
        repaired = b.repair_topic(name)
    if output_format(output) == "json":
        typer.echo(json.dumps({"topic": name, "repaired": [vars(r) | {"files": list(r.files)} for r in repaired]}))
        return
    if not repaired:
        typer.echo(f"nothing to repair: no partition of topic {name!r} holds records beyond its log end")
        return
    print_table(["TOPIC", "PARTITION", "LOG-END-OFFSET", "REMOVED-RECORDS", "REMOVED-OFFSETS", "FILES"],
                [[name, r.partition, r.log_end_offset, r.records, f"{r.first_offset}-{r.last_offset}",
                  ",".join(r.files)] for r in repaired])
    typer.echo(f"removed {sum(r.records for r in repaired)} records appended outside lakelog from "
               f"{len(repaired)} partition(s) of topic {name!r}: the partitions are served again")
