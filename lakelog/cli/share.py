"""`lakelog share`: share groups (KIP-932, queues) on a running server, through its HTTP API (a share group's
members and locks live in the server's memory): consume as one more worker of the group, describe (members,
each share-partition's start offset and in-flight records), list, and the group's configs.
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any
from urllib.parse import quote

import typer

from lakelog.cli.common import OutputOption, fail, output_format, parse_pairs, print_table
from lakelog.client import AcknowledgeType, KafkaException, Message, ShareConsumer
from lakelog.client.http import Session
from lakelog.platform.records import encode_bytes

share_app = typer.Typer(
    help="Share groups (KIP-932, queues) on a running server, through its HTTP API: consume, describe, list, "
         "config.",
    no_args_is_help=True)

UrlOption = typer.Option("http://127.0.0.1:8080", "--url", envvar="LAKELOG_URL",
                         help="The running server's HTTP address (a cluster's nodes: comma-separated)")
ApiKeyOption = typer.Option(None, "--api-key", envvar="LAKELOG_API_KEY", help="When the server has authentication")


def _path(group: str) -> str:
    return f"/v1/share-groups/{quote(group, safe='')}"


def _get(url: str, api_key: str | None, path: str, method: str = "GET", body: Any = None) -> Any:
    session = Session(url, api_key)
    try:
        return session.request(method, path, json=body)
    except KafkaException as exc:
        fail(f"{exc.args[0].code()}: {exc.args[0].str()}")
    finally:
        session.close()


def _field(raw: bytes | None, entry: dict[str, Any], name: str) -> None:
    text, b64 = encode_bytes(raw)
    entry[name] = text
    if b64:
        entry[f"{name}_encoding"] = "base64"


def message_json(message: Message, ack: str) -> str:
    """As `lakelog consume` prints a record (UTF-8 where valid, else base64 with a flag), with its delivery
    count and how it was acknowledged."""
    entry: dict[str, Any] = {"topic": message.topic(), "partition": message.partition(), "offset": message.offset(),
                             "timestamp": message.timestamp()[1]}
    _field(message.key(), entry, "key")
    _field(message.value(), entry, "value")
    headers = []
    for key, value in message.headers() or []:
        header: dict[str, Any] = {"key": key}
        _field(value, header, "value")
        headers.append(header)
    entry["headers"] = headers
    entry["delivery_count"] = message.delivery_count()
    entry["ack"] = ack
    return json.dumps(entry)


def decide(value: bytes | None, reject: list[re.Pattern[str]], release: list[re.Pattern[str]]) -> AcknowledgeType:
    """REJECT when the value (as UTF-8 text) matches a --reject-if, RELEASE when a --release-if, else ACCEPT."""
    text = (value or b"").decode("utf-8", "replace")
    if any(p.search(text) for p in reject):
        return AcknowledgeType.REJECT
    if any(p.search(text) for p in release):
        return AcknowledgeType.RELEASE
    return AcknowledgeType.ACCEPT


def _patterns(values: list[str], option: str) -> list[re.Pattern[str]]:
    try:
        return [re.compile(v) for v in values]
    except re.error as exc:
        fail(f"{option} takes a regular expression: {exc}")


@share_app.command("consume")
def consume(
    group: str,
    topics: list[str] = typer.Argument(..., help="One or more topics"),
    max_records: int | None = typer.Option(None, "--max", min=1, help="Stop after this many records"),
    reject_if: list[str] = typer.Option([], "--reject-if", help="Reject records whose value matches this regex "
                                                                 "(never delivered again; dead-lettered when the "
                                                                 "group has a dead-letter topic), repeatable"),
    release_if: list[str] = typer.Option([], "--release-if", help="Release records whose value matches (delivered "
                                                                   "again, to any member), repeatable"),
    follow: bool = typer.Option(False, "--follow", help="Keep waiting for new records"),
    wait: float = typer.Option(2.0, "--wait", help="Without --follow: stop once no record came for this long (s)"),
    url: str = UrlOption,
    api_key: str | None = ApiKeyOption,
) -> None:
    """Join the share group as one more worker and print one JSON line per record delivered, with its
    delivery count and how it was acknowledged (accept, unless --reject-if or --release-if match)."""
    reject, release = _patterns(reject_if, "--reject-if"), _patterns(release_if, "--release-if")
    consumer = ShareConsumer(url, {"group.id": group, "share.acknowledgement.mode": "explicit",
                                   "max.poll.records": min(max_records or 500, 500)}, api_key=api_key)
    printed = 0
    try:
        consumer.subscribe(topics)
        quiet_since = time.monotonic()
        while max_records is None or printed < max_records:
            messages = consumer.poll(0.5)
            if not messages:
                if not follow and time.monotonic() - quiet_since >= wait:
                    break
                continue
            quiet_since = time.monotonic()
            for message in messages:
                if max_records is not None and printed >= max_records:
                    break  # not acknowledged: back to the group when this member leaves
                kind = decide(message.value(), reject, release)
                consumer.acknowledge(message, kind)
                sys.stdout.write(message_json(message, kind.name.lower()) + "\n")
                printed += 1
            sys.stdout.flush()
            consumer.commit_sync()
    except KafkaException as exc:
        fail(f"{exc.args[0].code()}: {exc.args[0].str()}")
    finally:
        consumer.close()


@share_app.command("describe")
def describe(group: str, output: str | None = OutputOption, url: str = UrlOption,
             api_key: str | None = ApiKeyOption) -> None:
    """Members and their assignment; per share-partition the start offset and the records in flight (state,
    delivery count, owner)."""
    view = _get(url, api_key, _path(group))
    if output_format(output) == "json":
        typer.echo(json.dumps(view, indent=2))
        return
    typer.echo(f"share group {view['group']}: {view['state']}, epoch {view['epoch']}, "
               f"{len(view['members'])} member(s)")
    print_table(["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT", "LAST-HEARTBEAT-MS"],
                [[m["member_id"], m["client_id"] or None, m["client_host"] or None,
                  ",".join(f"{a['topic']}-{a['partition']}" for a in m["assignment"]), m["last_heartbeat_ms_ago"]]
                 for m in view["members"]])
    typer.echo("")
    print_table(["TOPIC", "PARTITION", "START-OFFSET", "NEXT-OFFSET", "IN-FLIGHT", "ACQUIRED", "MAX-DELIVERIES"],
                [[p["topic"], p["partition"], p["start_offset"], p["next_offset"], len(p["in_flight"]),
                  sum(1 for r in p["in_flight"] if r["state"] == "acquired"),
                  max((r["delivery_count"] for r in p["in_flight"]), default=None)] for p in view["partitions"]])
    records = [(p["topic"], p["partition"], r) for p in view["partitions"] for r in p["in_flight"]]
    if records:
        typer.echo("")
        print_table(["TOPIC", "PARTITION", "OFFSET", "STATE", "DELIVERY-COUNT", "OWNER"],
                    [[t, p, r["offset"], r["state"], r["delivery_count"], r["owner"]] for t, p, r in records])


@share_app.command("list")
def list_groups(output: str | None = OutputOption, url: str = UrlOption, api_key: str | None = ApiKeyOption) -> None:
    """The server's share groups, their state and member count."""
    groups = _get(url, api_key, "/v1/share-groups")["groups"]
    if output_format(output) == "json":
        for group in groups:
            typer.echo(json.dumps(group))
        return
    print_table(["GROUP", "TYPE", "STATE", "MEMBERS"], [[g["group"], g["type"], g["state"], g["members"]]
                                                        for g in groups])


@share_app.command("config")
def config(group: str, set_: list[str] = typer.Option([], "--set", help="name=value (empty value: back to the "
                                                                         "default), repeatable"),
           url: str = UrlOption, api_key: str | None = ApiKeyOption) -> None:
    """Show the group's configs, or change them (share.auto.offset.reset, share.record.lock.duration.ms,
    share.delivery.count.limit, share.isolation.level, errors.deadletterqueue.topic.name)."""
    if set_:
        changes = {name: value or None for name, value in parse_pairs(set_).items()}
        answer = _get(url, api_key, f"{_path(group)}/config", "PUT", {"config": changes})
    else:
        answer = _get(url, api_key, f"{_path(group)}/config")
    typer.echo(json.dumps(answer, indent=2))
