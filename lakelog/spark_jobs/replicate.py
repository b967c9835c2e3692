"""The replication job: followers catch up with their leaders, commit for commit.

Planned on the driver from the sites' Delta logs (which versions each follower
lacks); the data files of all missing versions are copied in parallel on
executors (sha256 checked on arrival, files already there skipped, so a
restarted run copies nothing twice); the commit files are then written on the
driver in version order. Diverged followers (a returning former leader) are
truncated to the last common version first. The same catch-up runs in the
ingest tier between acks=1 commits (`replication_interval_ms`).
"""

from __future__ import annotations

from typing import Any

from lakelog.compaction.planners import PartitionPlan
from lakelog.platform import Broker
from lakelog.platform.catalog.catalog import TopicMeta
from lakelog.platform.errors import InvalidRequest
from lakelog.platform.layout import topic_path
from lakelog.platform.replication.copier import CopyStats, FileCopier, copy_file
from lakelog.platform.replication.manager import ReplicaManager
from lakelog.platform.replication.state import ReplicaState
from lakelog.spark_jobs.connection import Connection
from lakelog.spark_jobs.report import JobReport, Progress


def spark_copier(spark: Any, source: Connection, target: Connection, table_path: str) -> FileCopier:
    """Copies a list of data files with one Spark task per slice of files."""

    def copy(paths: list[str]) -> CopyStats:
        slices = max(1, min(len(paths), spark.sparkContext.defaultParallelism * 2))
        parts = spark.sparkContext.parallelize(paths, slices).mapPartitions(
            lambda chunk: [_copy_on_executor(source, target, table_path, list(chunk))]).collect()
        total = CopyStats()
        for files, size, skipped in parts:
            total += CopyStats(files, size, skipped)
        return total

    return copy


def _copy_on_executor(source: Connection, target: Connection, table_path: str,
                      paths: list[str]) -> tuple[int, int, int]:
    src, dst = source.storage(), target.storage()
    total = CopyStats()
    for path in paths:
        total += copy_file(src, dst, src.uri(table_path, path), dst.uri(table_path, path))
    return total.files, total.bytes, total.skipped


def run_replication(broker: Broker, spark: Any, metas: list[TopicMeta], dry_run: bool = False,
                    progress: Progress | None = None) -> JobReport:
    if broker.replicas is None:
        raise InvalidRequest("no sites configured (LAKELOG_SITES): there is nothing to replicate")
    replicas = broker.replicas
    report = JobReport("replicate", dry_run)
    for meta in metas:
        for lag in replicas.lag(meta.name):
            if lag.versions_behind or lag.follower_version < 0:
                report.plans.append(PartitionPlan(
                    meta.name, -1, "replicate", (), (),
                    f"site {lag.site}: {lag.versions_behind} commits behind the leader "
                    f"({'in sync' if lag.in_sync else 'out of sync'})"))
    if dry_run:
        return report

    def copier_for(state: ReplicaState, follower: str) -> FileCopier | None:
        if spark is None:
            return None
        return spark_copier(spark, _connection(replicas, state.leader), _connection(replicas, follower),
                            topic_path(state.topic))

    for done, meta in enumerate(metas, 1):
        for copied in replicas.sync(meta.name, copier_for):
            report.commits += copied.versions
            report.files_added += copied.stats.files
            report.bytes_in += copied.stats.bytes
        if progress:
            progress(f"replicate: {meta.name}", done, len(metas))
    for copied in replicas.sync_control_tables(broker.control_site):
        report.commits += copied.versions
        report.files_added += copied.stats.files
        report.bytes_in += copied.stats.bytes
    return report


def _connection(replicas: ReplicaManager, site: str) -> Connection:
    storage = replicas.sites[site]
    return Connection(storage.root, dict(storage.options))

