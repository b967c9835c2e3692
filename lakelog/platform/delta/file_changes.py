"""A maintenance job's commit in Delta's own terms: a roll is an OPTIMIZE, retention and compaction a DELETE.

Delta readers decide from a commit's actions what it did, and show its commitInfo as the table's history.
Spark's Delta streaming source skips a commit whose actions all say `dataChange=false` (an OPTIMIZE
rearranges records, it adds none) and stops at one that removes data unless told to skip it; DESCRIBE
HISTORY and delta-rs's `history()` show the operation, its parameters and metrics. So the roll's adds and
removes carry `dataChange=false` under an OPTIMIZE commitInfo, and retention and compaction (which drop
records) carry `dataChange=true` under a DELETE, with the commitInfo fields Spark writes for these
operations. The commit file is written by lakelog, as its appends are (`TopicLog.commit_file_changes`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

import orjson
from deltalake.transaction import AddAction

from lakelog.platform.delta.delta_log import ENGINE, add_entry
from lakelog.platform.segments.index import SegmentFile

OPTIMIZE = "OPTIMIZE"
DELETE = "DELETE"
MAINTENANCE_JOB = "lakelog.job"  # commitInfo: the lakelog job that made the commit (roll, retention, compact)


@dataclass(frozen=True)
class Removed:
    """A data file a maintenance commit removes, with the records it held (partition, first and last offset,
    one range per slice of a file holding several partitions)."""

    path: str
    size: int
    partition_values: dict[str, str | None]
    ranges: tuple[tuple[int, int, int], ...]
    records: int


def removed_files(removes: list[SegmentFile], size_of: Callable[[SegmentFile], int],
                  partition_values: Callable[[int], dict[str, str | None]]) -> list[Removed]:
    """One entry per file (a file holding several partitions is named once per slice in `removes`)."""
    slices: dict[str, list[SegmentFile]] = {}
    for segment in removes:
        slices.setdefault(segment.path, []).append(segment)
    return [Removed(path, size_of(parts[0]), partition_values(parts[0].partition),
                    tuple((s.partition, s.min_offset, s.max_offset) for s in parts), sum(s.num_records for s in parts))
            for path, parts in slices.items()]


def operation(data_change: bool) -> str:
    """A rewrite that keeps every record is an OPTIMIZE; one that drops records (retention, compaction) a DELETE."""
    return DELETE if data_change else OPTIMIZE


def record_ranges(removed: list[Removed]) -> list[str]:
    """Each partition's removed offsets as SQL predicates, adjacent files' ranges merged: exactly the rows
    a commit that only removes files deletes (retention removes a prefix, so one range per partition)."""
    spans = sorted(r for f in removed for r in f.ranges)
    merged: list[list[int]] = []
    for partition, first, last in spans:
        if merged and merged[-1][0] == partition and first <= merged[-1][2] + 1:
            merged[-1][2] = max(merged[-1][2], last)
        else:
            merged.append([partition, first, last])
    return [f"partition = {p} AND offset BETWEEN {first} AND {last}" for p, first, last in merged]


def operation_parameters(data_change: bool, removed: list[Removed], adds: list[AddAction]) -> dict:
    """Spark's parameters for the operation (values JSON-encoded as Spark writes them). A DELETE's predicate
    is exact for retention; compaction keeps some records of the files it rewrites, so its predicate names
    what it drops from those ranges in words (no SQL says "superseded by a later record of its key")."""
    partitions = sorted({p for f in removed for p, _, _ in f.ranges})
    if not data_change:
        return {"predicate": json.dumps([f"partition IN ({', '.join(map(str, partitions))})"]),
                "zOrderBy": "[]", "auto": False}
    ranges = record_ranges(removed)
    if adds:
        ranges = [f"{r} AND (superseded by a later record of its key OR an expired tombstone)" for r in ranges]
    return {"predicate": json.dumps(ranges)}


def operation_metrics(data_change: bool, removed: list[Removed], adds: list[AddAction],
                      records_added: int) -> dict[str, str]:
    """Spark's metric names for OPTIMIZE and DELETE, as strings (as Spark writes them)."""
    metrics = {"numRemovedFiles": len(removed), "numAddedFiles": len(adds),
               "numRemovedBytes": sum(f.size for f in removed), "numAddedBytes": sum(a.size for a in adds)}
    if data_change:
        metrics |= {"numDeletedRows": sum(f.records for f in removed) - records_added, "numCopiedRows": records_added}
    return {key: str(value) for key, value in metrics.items()}


def commit_info(data_change: bool, removed: list[Removed], adds: list[AddAction], read_version: int,
                now: int, metadata: dict) -> dict:
    return {"timestamp": now, "operation": operation(data_change),
            "operationParameters": operation_parameters(data_change, removed, adds), "readVersion": read_version,
            "isolationLevel": "SnapshotIsolation", "isBlindAppend": False,
            "operationMetrics": operation_metrics(data_change, removed, adds, _records_in(adds)),
            "engineInfo": ENGINE, **metadata}


def encode_file_changes(adds: list[AddAction], removed: list[Removed], data_change: bool, read_version: int,
                        now: int, metadata: dict) -> bytes:
    """The commit file: commitInfo, one add per new file, one remove per removed file (the fields delta-rs
    writes), every file action with the same `dataChange`."""
    lines: list[dict] = [{"commitInfo": commit_info(data_change, removed, adds, read_version, now, metadata)}]
    lines += [{"add": {**add_entry(a), "dataChange": data_change}} for a in adds]
    lines += [{"remove": {"path": f.path, "dataChange": data_change, "deletionTimestamp": now,
                          "extendedFileMetadata": True, "partitionValues": f.partition_values, "size": f.size}}
              for f in removed]
    return b"\n".join(orjson.dumps(line) for line in lines)


def _records_in(adds: list[AddAction]) -> int:
    """The records of the added files, from their statistics (numRecords)."""
    total = 0
    for add in adds:
        try:
            total += int(json.loads(add.stats or "{}").get("numRecords") or 0)
        except (TypeError, ValueError):
            continue
    return total
