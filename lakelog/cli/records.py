"""`lakelog produce` (stdin lines to records) and `lakelog consume` (records to JSON lines, from an
offset or a group's committed offsets, committing as it prints with --group).

Both are top-level commands: `lakelog/cli/__init__.py` registers them on the app.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import typer

from lakelog.cli.common import broker, fail
from lakelog.platform import Broker, Record
from lakelog.platform.groups import GroupCoordinator
from lakelog.platform.groups import positions as group_positions
from lakelog.platform.groups.membership import check_group_id
from lakelog.platform.records import ConsumerRecord, TopicPartition, encode_bytes, records_to_columns
from lakelog.platform.schema_registry import SchemaRegistry
from lakelog.platform.schema_registry.validation import RecordValidator
from lakelog.platform.typed import produce as typed_produce

PRODUCE_CHUNK = 1000


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


def produce(
    topic: str,
    key_separator: str | None = typer.Option(None, "--key-separator", help="Lines are key<SEP>value"),
    partition: int | None = typer.Option(None, "--partition"),
    acks: str = typer.Option("1", "--acks", help="0, 1 or all"),
    header: list[str] = typer.Option([], "--header", "-H", help="key=value added to every record, repeatable"),
) -> None:
    """Produce one record per stdin line; print {"partition", "offset"} per record."""
    headers = parse_headers(header) or None
    with broker() as b:
        typed = b.topic(topic).config.validates_schemas  # unknown topic: fail before reading stdin
        validator = RecordValidator(SchemaRegistry(b.storage)) if typed else None
        for lines in _stdin_chunks(sys.stdin.isatty()):
            records = []
            for line in lines:
                key: bytes | None = None
                value = line
                if key_separator is not None:
                    if key_separator not in line:
                        fail(f"line has no key separator {key_separator!r}: {line[:80]!r}")
                    raw_key, value = line.split(key_separator, 1)
                    key = raw_key.encode()
                records.append(Record(value.encode(), key=key, partition=partition, headers=headers))
            if validator is not None:  # a typed topic checks its records as over HTTP and Kafka
                checked = typed_produce.screen(b, validator, topic, records_to_columns(records))
                result = typed_produce.submit(b, checked, acks, None, None).result()
            else:
                result = b.produce(topic, records, acks=acks)
            sys.stdout.write("".join(
                json.dumps({"partition": p, "offset": o}) + "\n" for p, o, _ in result.records()))
            sys.stdout.flush()


def _header_json(key: str, value: bytes | None) -> dict:
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

    def __init__(self, coordinator: GroupCoordinator | None, group: str | None,
                 start: dict[TopicPartition, int] | None = None) -> None:
        self.coordinator, self.group = coordinator, group
        self.pending: dict[TopicPartition, int] = dict(start or {})  # positions reached, not committed yet

    def read(self, tp: TopicPartition, next_offset: int) -> None:
        if self.coordinator is not None:
            self.pending[tp] = next_offset

    def commit(self) -> None:
        if self.coordinator is None or self.group is None or not self.pending:
            return
        rows: list[tuple[str, int, int, str | None]] = [
            (t, p, o, None) for (t, p), o in sorted(self.pending.items())]
        self.pending = {}
        self.coordinator.commit(self.group, None, -1, rows).result()


def _consume_loop(b: Broker, topic: str, positions: dict[int, int], max_records: int | None, follow: bool,
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


def consume(
    topic: str,
    partition: int | None = typer.Option(None, "--partition"),
    start: str | None = typer.Option(None, "--from", help="earliest (default), latest or an offset; "
                                                             "not with --group"),
    max_records: int | None = typer.Option(None, "--max"),
    follow: bool = typer.Option(False, "--follow", help="Keep waiting for new records"),
    group: str | None = typer.Option(None, "--group", "-g",
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
            reached = {(topic, p): o for p, o in positions.items()}  # every partition read is the group's
            _consume_loop(b, topic, positions, max_records, follow, Committer(coordinator, group, reached))
        finally:
            coordinator.close()
