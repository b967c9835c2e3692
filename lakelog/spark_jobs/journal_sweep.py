"""The `journal-sweep` job: deletes journal objects of fenced generations whose entries are all in their
tables (lakelog/platform/journal/sweep.py); no Spark. One plan per generation it deleted from or still
waits on, named by the generation's folder."""

from __future__ import annotations

from lakelog.compaction.planners import PartitionPlan
from lakelog.platform import Broker
from lakelog.platform.journal.objects import generation_path
from lakelog.platform.journal.sweep import GenerationSwept, sweep_broker
from lakelog.spark_jobs.report import JobReport, Progress

JOB = "journal-sweep"


def run_journal_sweep(broker: Broker, dry_run: bool, progress: Progress | None = None) -> JobReport:
    if progress:
        progress(f"{JOB}: reading fenced generations", 0, 1)
    swept = sweep_broker(broker, dry_run)
    report = JobReport(JOB, dry_run, plans=[_plan(g) for g in swept.swept])
    report.files_deleted = 0 if dry_run else swept.deleted
    if progress:
        progress(f"{JOB}: {swept.deleted} objects of {swept.fenced} fenced generations", 1, 1)
    return report


def _plan(swept: GenerationSwept) -> PartitionPlan:
    waiting = f"; kept for {', '.join(swept.waiting)} (not in their tables yet)" if swept.waiting else ""
    return PartitionPlan(generation_path(swept.node, swept.run), -1, JOB, (), (),
                         f"delete {len(swept.deleted)} journal objects, {swept.kept} left{waiting}")
