"""Vacuum: physically delete data files the table no longer references, after `file.delete.delay.ms`.

Retention, roll and compaction remove files from the table in a commit; the
files stay on storage so that readers in flight (a fetch, a Spark task that
planned them) finish. This job reads the remove actions of the commits made
since its last run, remembers when each file was removed (in
`<table>/_lakelog/vacuum.json`, ignored by Delta readers as an `_` folder), and
deletes those removed longer ago than the topic's `file.delete.delay.ms`.
Data files that no commit references (a writer that lost a commit race, or a
remove whose commit file was cleaned before vacuum read it) are deleted after
a grace period. It also deletes sink staging files left by crashed queries
after a day.
"""

from __future__ import annotations

import json
import time
from typing import Any

from lakelog.compaction.planners import PartitionPlan
from lakelog.platform import Broker
from lakelog.platform.catalog.catalog import TopicMeta
from lakelog.platform.delta.delta_log import commit_uri, removed_paths
from lakelog.platform.delta.table_retention import advertise_retention
from lakelog.platform.layout import SINK_STAGING
from lakelog.platform.log import TopicLog
from lakelog.spark_jobs.report import JobReport, Progress

STATE_FILE = "_lakelog/vacuum.json"
STAGING_MAX_AGE_MS = 24 * 3600 * 1000
ORPHAN_GRACE_MS = 15 * 60 * 1000


def run_vacuum(broker: Broker, metas: list[TopicMeta], dry_run: bool, now_ms: int | None,
               progress: Progress | None = None) -> JobReport:
    now = int(time.time() * 1000) if now_ms is None else now_ms
    report = JobReport("vacuum", dry_run)
    for done, meta in enumerate(metas, 1):
        topic_log = broker.committed_log(meta.name)
        topic_log.refresh()
        state = _load_state(topic_log)
        _scan_removes(topic_log, state)
        active = {f.path for p in range(meta.partitions) for f in topic_log.segments(p)}
        horizon = now - meta.config.file_delete_delay_ms
        due = sorted(p for p, ts in state["pending"].items() if ts <= horizon and p not in active)
        due += _orphans_due(topic_log, state, active, now, meta.config.file_delete_delay_ms)
        if due:
            report.plans.append(PartitionPlan(meta.name, -1, "vacuum", (), (tuple(due),),
                                              f"delete {len(due)} files removed over "
                                              f"{meta.config.file_delete_delay_ms} ms ago"))
        if not dry_run:
            # What is deleted now was advertised as kept no longer (and tables from before the rule catch up).
            advertise_retention(lambda: topic_log, meta.config.file_delete_delay_ms)  # noqa: B023 (called at once)
            topic_log.storage.delete_files([f"{topic_log.uri}/{p}" for p in due])
            for p in due:
                state["pending"].pop(p, None)
                state["orphans"].pop(p, None)
            _save_state(topic_log, state)
            report.files_deleted += len(due)
        if progress:
            progress(f"vacuum: {meta.name}", done, len(metas))
    report.files_deleted += _clean_staging(broker, now, dry_run)
    return report


def _orphans_due(topic_log: TopicLog, state: dict[str, Any], active: set[str], now: int, delay_ms: int) -> list[str]:
    """Data files no commit references: left by a writer that lost a commit race or crashed mid-write,
    or removed by a commit whose log file was already cleaned. Each is deleted only once it has been
    unreferenced (as far as vacuum saw) and on storage for at least ORPHAN_GRACE_MS (and the topic's
    file.delete.delay.ms): far longer than any write in flight takes to commit."""
    listed = _data_files(topic_log)
    orphans = state.setdefault("orphans", {})
    for path in list(orphans):
        if path in active or path not in listed:
            del orphans[path]
    for path in listed:
        if path not in active and path not in state["pending"]:
            orphans.setdefault(path, now)
    grace = max(ORPHAN_GRACE_MS, delay_ms)
    return sorted(p for p, seen in orphans.items() if now - seen >= grace and now - listed[p] >= ORPHAN_GRACE_MS)


def _data_files(topic_log: TopicLog) -> dict[str, int]:
    """The table's data files (not the log's checkpoints), with their modification time (ms)."""
    fs = topic_log.storage.fsspec
    base = topic_log.storage.fs_path(topic_log.uri)
    if not fs.exists(base):
        return {}
    found = {}
    for path, info in fs.find(base, detail=True).items():
        relative = path[len(base):].lstrip("/")
        # Layout 1 files sit in partition folders, layout 2 files at the table's top level.
        if not relative.endswith(".parquet") or relative.startswith("_") or \
                ("/" in relative and not relative.startswith("partition=")):
            continue
        modified = info.get("mtime") or info.get("LastModified") or info.get("created")
        seconds = modified.timestamp() if hasattr(modified, "timestamp") else float(modified or 0)
        found[relative] = int(seconds * 1000)
    return found


def _scan_removes(topic_log: TopicLog, state: dict[str, Any]) -> None:
    """Add the remove actions of commits after the last scanned version to the pending deletes."""
    current = topic_log.version
    for version in range(state["scanned_version"] + 1, current + 1):
        try:
            commit = topic_log.storage.read_bytes(commit_uri(topic_log.uri, version))
        except FileNotFoundError:
            continue  # cleaned up with the log's retention (checkpointed long ago)
        state["pending"].update(removed_paths(commit))
    state["scanned_version"] = max(state["scanned_version"], current)


def _load_state(topic_log: TopicLog) -> dict[str, Any]:
    path = topic_log.storage.fs_path(f"{topic_log.uri}/{STATE_FILE}")
    try:
        with topic_log.storage.fsspec.open(path, "r") as f:
            return json.load(f)
    except FileNotFoundError:
        return {"scanned_version": -1, "pending": {}, "orphans": {}}


def _save_state(topic_log: TopicLog, state: dict[str, Any]) -> None:
    uri = f"{topic_log.uri}/{STATE_FILE}"
    topic_log.storage.makedirs(uri.rsplit("/", 1)[0])
    with topic_log.storage.fsspec.open(topic_log.storage.fs_path(uri), "w") as f:
        json.dump(state, f)


def _clean_staging(broker: Broker, now_ms: int, dry_run: bool) -> int:

    storage = broker.storage
    base = storage.fs_path(storage.uri(SINK_STAGING))
    if not storage.fsspec.exists(base):
        return 0
    old = []
    for path, info in storage.fsspec.find(base, detail=True).items():
        modified = info.get("mtime") or info.get("LastModified")
        seconds = modified.timestamp() if hasattr(modified, "timestamp") else float(modified or now_ms / 1000)
        if now_ms - seconds * 1000 > STAGING_MAX_AGE_MS:
            old.append(path)
    if not dry_run:
        for path in old:
            storage.fsspec.rm(path)
    return len(old)
