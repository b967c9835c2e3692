"""The maintenance jobs' common runner: plan on the driver, rewrite on executors, commit per partition.

Each job plans from the Delta snapshot (file stats: cheap), ships rewrite
tasks to executors (one task per partition plan), and commits each
partition's added and removed files in one Delta commit through
`TopicLog.commit_file_changes`. Producers appending at the same time never
conflict (no offset moves); when another job removed one of the input files
first, the outputs are deleted and the partition is re-planned, up to
`MAX_ROUNDS` times. A run with nothing to do commits nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deltalake.transaction import AddAction

from lakelog.compaction.planners import PLANNERS, PartitionPlan
from lakelog.compaction.rewrite import RewriteResult, compact_segments, merge_segments
from lakelog.platform import Broker
from lakelog.platform.catalog.catalog import TopicMeta
from lakelog.platform.log import TopicLog
from lakelog.platform.ops.job_runs import DEFAULT_RETENTION_MS, JobRun, record_runs
from lakelog.platform.segments.index import SegmentFile
from lakelog.platform.segments.segment import TableLayout
from lakelog.spark_jobs.connection import Connection
from lakelog.spark_jobs.journal_sweep import run_journal_sweep
from lakelog.spark_jobs.replicate import run_replication
from lakelog.spark_jobs.report import JobReport, Progress
from lakelog.spark_jobs.vacuum import run_vacuum

log = logging.getLogger(__name__)

JOBS = ("retention", "roll", "compact", "vacuum", "journal-sweep")
REPLICATION_JOB = "replicate"  # only with sites configured
MAX_ROUNDS = 3


@dataclass(frozen=True)
class RewriteTask:
    connection: Connection
    table_uri: str
    layout: TableLayout
    plan: PartitionPlan


def run_job(job: str, broker: Broker, spark: Any = None, topics: Sequence[str] | None = None,
            dry_run: bool = False, now_ms: int | None = None, progress: Progress | None = None) -> JobReport:
    """Run one job over the given topics (all when None). `spark=None` runs rewrites in this process."""
    if job not in JOBS and job != REPLICATION_JOB:
        raise ValueError(f"unknown job {job!r}; jobs: {', '.join((*JOBS, REPLICATION_JOB))}")
    started = time.monotonic()
    if job == REPLICATION_JOB:
        report = run_replication(broker, spark, _metas(broker, topics), dry_run, progress)
    elif job == "vacuum":
        report = run_vacuum(broker, _metas(broker, topics), dry_run, now_ms, progress)
    elif job == "journal-sweep":  # over the root's journal generations, not topics
        if topics:
            raise ValueError("journal-sweep runs over the root's journal generations: it takes no topics")
        report = run_journal_sweep(broker, dry_run, progress)
    else:
        report = JobReport(job, dry_run)
        wanted: set[tuple[str, int]] | None = None
        for _ in range(MAX_ROUNDS):
            plans = _plan(job, broker, _metas(broker, topics), now_ms, wanted)
            if not report.plans:
                report.plans = plans
            if dry_run or not plans:
                break
            conflicted = _execute_and_commit(job, broker, spark, plans, report, progress)
            if not conflicted:
                break
            wanted = conflicted
    report.seconds = time.monotonic() - started
    log.info("job finished", extra={"fields": {k: v for k, v in report.to_dict().items() if k != "plans"}})
    return report


def run_recorded(job: str, broker: Broker, spark: Any, topics: Sequence[str] | None, dry_run: bool, trigger: str,
                 retention_ms: int = DEFAULT_RETENTION_MS, progress: Progress | None = None) -> JobReport:
    """`run_job`, with the run recorded in `_control/job_runs` (for `GET /v1/jobs`) as the scheduler records
    its rounds: a failed run too (then the error goes on), a dry run not (it changed nothing). A failure to
    record is logged, never the run's failure."""
    started = time.time()
    try:
        report = run_job(job, broker, spark, topics, dry_run, progress=progress)
    except Exception:
        if not dry_run:
            _record(broker, JobRun(job, ",".join(sorted(topics or ())), int(started * 1000), time.time() - started,
                                   False, trigger=trigger), retention_ms)
        raise
    if not dry_run:
        _record(broker, job_run(report, started, trigger), retention_ms)
    return report


def job_run(report: JobReport, started_s: float, trigger: str = "schedule") -> JobRun:
    """What a run did, as one row of `_control/job_runs`: the topics it planned work on, its counts."""
    return JobRun(report.job, ",".join(sorted({p.topic for p in report.plans})), int(started_s * 1000),
                  report.seconds, True, report.commits, report.conflicts, report.files_removed, report.files_added,
                  report.bytes_in, report.records_in, report.records_out, report.files_deleted, trigger)


def _record(broker: Broker, run: JobRun, retention_ms: int) -> None:
    try:
        record_runs(broker.storage, [run], retention_ms)
    except Exception:  # the record is for the console: never a reason to fail the job
        log.exception("could not record the run of %s", run.job)


def _metas(broker: Broker, topics: Sequence[str] | None) -> list[TopicMeta]:
    metas = broker.list_topics()
    if topics:
        known = {m.name for m in metas}
        for name in topics:
            if name not in known:
                broker.topic(name)  # raises UNKNOWN_TOPIC_OR_PARTITION with the core's message
        metas = [m for m in metas if m.name in set(topics)]
    return metas


def _plan(job: str, broker: Broker, metas: list[TopicMeta], now_ms: int | None,
          wanted: set[tuple[str, int]] | None) -> list[PartitionPlan]:
    planner = PLANNERS[job]
    now = int(time.time() * 1000) if now_ms is None else now_ms
    plans = []
    for meta in metas:
        topic_log = broker.committed_log(meta.name)
        topic_log.refresh()
        segments = topic_log.all_segments()
        plans += [p for p in planner(meta, lambda partition: segments.get(partition, []), now)  # noqa: B023 (called here)
                  if wanted is None or (p.topic, p.partition) in wanted]
    return plans


def _execute_and_commit(job: str, broker: Broker, spark: Any, plans: list[PartitionPlan], report: JobReport,
                        progress: Progress | None) -> set[tuple[str, int]]:
    if job == "retention":  # metadata only: nothing for executors to do
        results: list[list[RewriteResult]] = [[] for _ in plans]
    else:
        tasks = [_task(broker.topic_log(p.topic), p) for p in plans]
        if progress:
            progress(f"{job}: rewriting {len(tasks)} partition(s) on executors", 0, len(plans))
        if spark is not None:
            results = spark.sparkContext.parallelize(tasks, len(tasks)).map(execute_rewrite).collect()
        else:
            results = [execute_rewrite(t) for t in tasks]
    conflicted: set[tuple[str, int]] = set()
    done = 0
    for batch in _commit_batches(list(zip(plans, results))):
        if not _commit(job, broker, batch, report):
            conflicted |= {(plan.topic, plan.partition) for plan, _ in batch}
        done += len(batch)
        if progress:
            progress(f"{job}: committed {', '.join(f'{p.topic}-{p.partition}' for p, _ in batch)}", done, len(plans))
    return conflicted


Planned = tuple[PartitionPlan, list[RewriteResult]]


def _commit_batches(done: list[Planned]) -> list[list[Planned]]:
    """One commit per partition, but one per topic for the partitions whose inputs include slices of
    shared files: such a file leaves the table only with every partition's slice rewritten."""
    batches: list[list[Planned]] = []
    shared: dict[str, list[Planned]] = {}
    for plan, results in done:
        if any(f.shared for f in plan.inputs):
            shared.setdefault(plan.topic, []).append((plan, results))
        else:
            batches.append([(plan, results)])
    return batches + list(shared.values())


def _task(topic_log: TopicLog, plan: PartitionPlan) -> RewriteTask:
    """Where the topic's table lives: the root, or its leader site when replicated."""
    connection = Connection(topic_log.storage.root, dict(topic_log.storage.options))
    return RewriteTask(connection, topic_log.uri, topic_log.layout, plan)


def execute_rewrite(task: RewriteTask) -> list[RewriteResult]:
    """Executor side: rewrite each group of the plan; results name the files written."""
    storage = task.connection.storage()
    plan = task.plan
    by_path = {f.path: f for f in plan.inputs}
    results = []
    for i, group in enumerate(plan.groups):
        inputs = [by_path[p] for p in group]
        if plan.job == "roll":
            finished = plan.finished[i] if plan.finished else True
            results.append(merge_segments(storage, task.table_uri, task.layout, plan.partition, inputs,
                                          plan.target_bytes, finished))
        else:
            results.append(compact_segments(storage, task.table_uri, task.layout, plan.partition, inputs,
                                            plan.target_bytes, plan.delete_retention_ms))
    return results


def _commit(job: str, broker: Broker, batch: list[Planned], report: JobReport) -> bool:
    """Commit the rewrites of one partition, or of several partitions of one topic, in one commit."""
    topic_log: TopicLog = broker.topic_log(batch[0][0].topic)
    removes: list[SegmentFile] = []
    adds: list[AddAction] = []
    results = [r for _, rs in batch for r in rs]
    for plan, planned in batch:
        by_path = {f.path: f for f in plan.inputs}
        if job == "retention":
            removes += plan.inputs
            continue
        for r in planned:
            if r.changed:
                removes += [by_path[p] for p in r.inputs]
                adds += [AddAction(o.path, o.size_bytes, topic_log.layout.partition_values(o.partition),
                                   o.modification_time_ms, job != "roll", o.stats) for o in r.outputs]
    if not removes:
        report.unchanged += len(batch)
        return True
    if topic_log.commit_file_changes(adds, removes, data_change=job != "roll", job=job):  # roll: an OPTIMIZE
        report.commits += 1
        report.files_removed += len({f.path for f in removes})
        report.files_added += len(adds)
        report.bytes_in += sum(f.size_bytes for f in removes)
        report.records_in += sum(r.records_in for r in results if r.changed)
        report.records_out += sum(r.records_out for r in results if r.changed)
        return True
    report.conflicts += 1
    topic_log.storage.delete_files([f"{topic_log.uri}/{a.path}" for a in adds])  # orphans of the lost commit
    return False
