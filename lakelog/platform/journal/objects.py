"""Journal objects: where they live and their bytes (pure: no I/O).

```
<root>/_journal/gens/<node>/<run>/<slot, 20 digits>
```

One object is one flush of a node: for each (topic, partition) a dense run of records at offsets the node
assigned before writing it. The bytes are one Arrow IPC stream: a `topic` column beside the topic
table's own columns (TOPIC_SCHEMA, producer fields included), and in the schema's metadata a header: the
format version, the kind, the generation and slot, and the index of entries (topic, partition, base,
count). A tombstone (a generation's last slot once committed: the slot stays taken, see
docs/architecture.md) and a fence are the same stream with no rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pyarrow as pa

from lakelog.platform.journal.errors import JournalCorrupt
from lakelog.schemas import TOPIC_SCHEMA

JOURNAL = "_journal"
FORMAT_VERSION = 1
HEADER_KEY = b"lakelog.journal"
RECORDS, TOMBSTONE, FENCE = "records", "tombstone", "fence"
KINDS = (RECORDS, TOMBSTONE, FENCE)
OBJECT_SCHEMA = pa.schema([pa.field("topic", pa.string(), nullable=False), *TOPIC_SCHEMA])


def generations_path(node: str) -> str:
    """A node's generations, relative to the root."""
    return f"{JOURNAL}/gens/{node}"


def generation_path(node: str, run: str) -> str:
    return f"{generations_path(node)}/{run}"


def slot_name(slot: int) -> str:
    if slot < 0:
        raise ValueError(f"a slot is >= 0, got {slot}")
    return f"{slot:020d}"


def slot_of(name: str) -> int | None:
    """The slot a listed name holds; None for anything else (a temporary file of a local write)."""
    return int(name) if len(name) == 20 and name.isdigit() else None


@dataclass(frozen=True)
class Entry:
    """One (topic, partition)'s dense run of records in one journal object: offsets [base, base + count)."""

    topic: str
    partition: int
    base: int
    count: int

    @property
    def end(self) -> int:
        return self.base + self.count


@dataclass
class JournalObject:
    kind: str
    node: str
    run: str
    slot: int
    entries: list[Entry] = field(default_factory=list)
    records: pa.Table = field(default_factory=OBJECT_SCHEMA.empty_table)

    def topics(self) -> set[str]:
        return {entry.topic for entry in self.entries}

    def topic_records(self, topic: str) -> pa.Table:
        """The records of one topic (TOPIC_SCHEMA), in the order written: by partition, then offset."""
        rows = [i for i, name in enumerate(self.records.column("topic").to_pylist()) if name == topic]
        return self.records.take(pa.array(rows, pa.int64())).drop_columns(["topic"])


def entries_of(topic: str, table: pa.Table) -> list[Entry]:
    """The entries of one topic's records (TOPIC_SCHEMA, sorted by partition then offset): one per partition,
    refused unless each partition's offsets are dense."""
    partitions = table.column("partition").to_numpy()
    offsets = table.column("offset").to_numpy()
    entries = []
    for p in np.unique(partitions):
        run = offsets[partitions == p]
        base = int(run[0])
        if not np.array_equal(run, np.arange(base, base + len(run))):
            raise ValueError(f"offsets of {topic}-{int(p)} in a journal entry are not dense from {base}")
        entries.append(Entry(topic, int(p), base, len(run)))
    return entries


def encode_records(node: str, run: str, slot: int, topics: Mapping[str, pa.Table],
                   entries: Mapping[str, list[Entry]] | None = None) -> bytes:
    """One flush: per topic its records (TOPIC_SCHEMA, offsets assigned, sorted by partition then offset);
    `entries`: per topic its records' entries when the caller has them (`entries_of`)."""
    found: list[Entry] = []
    parts = []
    for topic, table in topics.items():
        if table.num_rows == 0:
            continue
        if not table.schema.equals(TOPIC_SCHEMA):  # a cast per column otherwise
            table = table.select(TOPIC_SCHEMA.names).cast(TOPIC_SCHEMA)
        given = entries.get(topic) if entries is not None else None
        found.extend(given if given is not None else entries_of(topic, table))
        parts.append(table.add_column(0, OBJECT_SCHEMA.field("topic"),
                                      pa.array([topic] * table.num_rows, pa.string())))
    records = (parts[0] if len(parts) == 1 else pa.concat_tables(parts)) if parts else OBJECT_SCHEMA.empty_table()
    return _encode(RECORDS, node, run, slot, found, records)


def encode_marker(kind: str, node: str, run: str, slot: int) -> bytes:
    """A tombstone or a fence: a slot taken, no records."""
    if kind not in (TOMBSTONE, FENCE):
        raise ValueError(f"a marker is a tombstone or a fence, got {kind!r}")
    return _encode(kind, node, run, slot, [], OBJECT_SCHEMA.empty_table())


def _encode(kind: str, node: str, run: str, slot: int, entries: list[Entry], records: pa.Table) -> bytes:
    header = {"version": FORMAT_VERSION, "kind": kind, "node": node, "run": run, "slot": slot,
              "entries": [[e.topic, e.partition, e.base, e.count] for e in entries]}
    records = records.replace_schema_metadata({HEADER_KEY: json.dumps(header).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, records.schema) as writer:
        writer.write_table(records)
    return sink.getvalue().to_pybytes()


def decode(data: bytes) -> JournalObject:
    """The object these bytes hold; `JournalCorrupt` for anything else."""
    try:
        records = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
        header = json.loads((records.schema.metadata or {})[HEADER_KEY])
    except (pa.ArrowException, OSError, KeyError, ValueError, TypeError) as exc:
        raise JournalCorrupt(f"not a journal object: {exc}") from None
    if header.get("version") != FORMAT_VERSION or header.get("kind") not in KINDS:
        raise JournalCorrupt(f"journal object of an unknown format: version {header.get('version')!r}, "
                             f"kind {header.get('kind')!r}")
    entries = [Entry(str(t), int(p), int(b), int(c)) for t, p, b, c in header["entries"]]
    if sum(e.count for e in entries) != records.num_rows:
        raise JournalCorrupt(f"journal object holds {records.num_rows} records, its index {len(entries)} entries "
                             "of another count")
    return JournalObject(header["kind"], header["node"], header["run"], int(header["slot"]), entries,
                         records.replace_schema_metadata(None).cast(OBJECT_SCHEMA))
