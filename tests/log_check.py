"""The check every crash, concurrency and fuzz test ends with: the topic tables, read as any Delta reader
reads them, hold each (partition, offset) once, with no gaps, up to the partition's log end offset. A gap
is allowed only where the table declares it: an empty file whose offset statistics cover it (an aborted
transaction's placeholder, or a transaction's commit or abort marker, which takes an offset as Kafka's
control batch does); an open transaction's reserved offsets, covered by no file, fail the check.

It reads the data files named by the table's snapshot directly (not through lakelog's fetch path, which
could hide a duplicate) and compares with the `lakelog.partition.<p>` SetTransaction versions.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from lakelog.platform.catalog.catalog import Catalog
from lakelog.platform.storage import Storage

PARTITION_APP_PREFIX = "lakelog.partition."  # the log's SetTransaction app ids, spelled out independently
OPEN_APP_PREFIX = "lakelog.open."  # the first offset + 1 of a partition's oldest open transaction (0: none)


def _open(root: str, topic: str, storage: Mapping[str, str] | None) -> tuple[Storage, DeltaTable]:
    store = Storage.open(root, storage)
    return store, DeltaTable(store.uri("topics", topic), storage_options=store.delta_options())


def topic_offsets(root: str, topic: str, storage: Mapping[str, str] | None = None) -> dict[int, list[int]]:
    """Every offset stored per partition, duplicates included, sorted."""
    store, table = _open(root, topic, storage)
    return _stored_offsets(store, topic, table)


def _stored_offsets(store: Storage, topic: str, table: DeltaTable) -> dict[int, list[int]]:
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    found: dict[int, list[int]] = {}
    # Layout 1: the partition is the file's partition value; layout 2: a column of the file.
    partitions = actions.get("partition.partition", [None] * len(actions["path"]))
    for path, partition in zip(actions["path"], partitions):
        with store.open_input(f"{store.uri('topics', topic)}/{path}") as source:
            columns = pq.read_table(source, columns=["offset"] if partition is not None else ["partition", "offset"])
        offsets = columns.column("offset").to_pylist()
        in_file = [int(partition)] * len(offsets) if partition is not None else columns.column("partition").to_pylist()
        for p, offset in zip(in_file, offsets):
            found.setdefault(p, []).append(offset)
    return {p: sorted(offsets) for p, offsets in found.items()}


def aborted_ranges(root: str, topic: str, storage: Mapping[str, str] | None = None) -> dict[int, set[int]]:
    """The offsets the table declares empty, per partition: files of no records whose offset statistics
    cover a range (an aborted transaction's placeholder, a transaction's marker, or compaction's when it
    dropped a whole range)."""
    return _declared_empty(_open(root, topic, storage)[1])


def _declared_empty(table: DeltaTable) -> dict[int, set[int]]:
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    partitions = actions.get("partition.partition") or actions.get("min.partition") or [None] * len(actions["path"])
    declared: dict[int, set[int]] = {}
    for count, partition, low, high in zip(actions["num_records"], partitions, actions["min.offset"],
                                           actions["max.offset"]):
        if count == 0 and partition is not None and low is not None and high is not None:
            declared.setdefault(int(partition), set()).update(range(int(low), int(high) + 1))
    return declared


def assert_topic_intact(root: str, topic: str, storage: Mapping[str, str] | None = None,
                        allow_gaps: bool = False) -> dict[int, list[int]]:
    """No duplicate (partition, offset); offsets dense (unless compaction may have made gaps) up to the
    log end offset, except where an empty file declares a range empty (an aborted transaction's offsets,
    which are never reused: `aborted_ranges`). Returns the offsets per partition.

    Everything is read from one snapshot: the table may still be committed behind the journal while this
    runs, and a log end offset from one version beside files from a later one would be a false alarm."""
    store, table = _open(root, topic, storage)
    offsets = _stored_offsets(store, topic, table)
    declared = _declared_empty(table)
    problems = []
    for partition in sorted(set(offsets) | set(declared)):
        stored = offsets.get(partition, [])
        empty = declared.get(partition, set())
        duplicates = sorted(o for o, n in Counter(stored).items() if n > 1)
        if duplicates:
            problems.append(f"{topic}-{partition}: duplicate offsets {duplicates[:10]}")
        overlap = sorted(empty & set(stored))
        if overlap:
            problems.append(f"{topic}-{partition}: offsets {overlap[:10]} both stored and declared empty")
        end = table.transaction_version(f"{PARTITION_APP_PREFIX}{partition}") or 0
        open_first = (table.transaction_version(f"{OPEN_APP_PREFIX}{partition}") or 0) - 1
        if open_first >= 0:
            problems.append(f"{topic}-{partition}: a transaction is still open from offset {open_first}")
        last = max([*stored[-1:], *empty], default=None)
        if last is not None and last != end - 1:
            problems.append(f"{topic}-{partition}: last offset {last} but log end offset {end}")
        if not allow_gaps and last is not None:
            first = min([*stored[:1], *empty])
            missing = sorted(set(range(first, last + 1)) - set(stored) - empty)
            if missing:
                problems.append(f"{topic}-{partition}: missing offsets {missing[:10]}")
    assert not problems, "; ".join(problems)
    return offsets


def assert_root_intact(root: str, storage: Mapping[str, str] | None = None,
                       allow_gaps: bool = False) -> dict[str, dict[int, list[int]]]:
    """assert_topic_intact for every topic in the root's catalog."""
    catalog = Catalog(Storage.open(root, storage))
    return {meta.name: assert_topic_intact(root, meta.name, storage, allow_gaps) for meta in catalog.list_topics()}
