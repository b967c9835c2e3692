"""`lakelog jobs`: retention, roll, compact, vacuum and replicate on local Spark (lakelog/spark_jobs), and
journal-sweep (no Spark), with a progress bar, each run recorded for `GET /v1/jobs`.
"""

from __future__ import annotations

import json

import typer

from lakelog.cli.common import settings
from lakelog.platform import Broker
from lakelog.settings import own_journal

jobs_app = typer.Typer(help="Maintenance jobs on local Spark: retention, roll, compact, vacuum.",
                       no_args_is_help=True)


def _run_job(job: str, topic: list[str] | None, dry_run: bool) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from lakelog.spark_jobs.jobs import run_recorded
    from lakelog.spark_jobs.session import local_session

    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task(f"{job}: starting local Spark", total=None)
        spark = None if job in ("retention", "vacuum", "journal-sweep") or dry_run else local_session(f"lakelog-{job}")
        progress.update(task, description=f"{job}: planning")

        def step(message: str, done: int, total: int) -> None:
            progress.update(task, description=message, completed=done, total=total)

        # Recorded for `GET /v1/jobs` (a dry run is not).
        with Broker(own_journal(settings(), "job"), create_catalog=False) as b:
            report = run_recorded(job, b, spark, topic or None, dry_run, "cli",
                                  settings().job_runs_retention_ms, progress=step)
    for plan in report.plans:
        console.print(f"[bold]{plan.topic}[/bold]-{plan.partition}: {plan.description}" if plan.partition >= 0
                      else f"[bold]{plan.topic}[/bold]: {plan.description}")
    if not report.plans:
        console.print(f"{job}: nothing to do")
    summary = report.to_dict()
    summary.pop("plans")
    typer.echo(json.dumps(summary))


def _job_command(job: str, help_text: str) -> None:
    @jobs_app.command(job, help=help_text)
    def command(topic: list[str] | None = typer.Option(None, "--topic", "-t", help="repeatable; all when omitted"),
                dry_run: bool = typer.Option(False, "--dry-run", help="print the plan, change nothing")) -> None:
        _run_job(job, topic, dry_run)


_job_command("retention", "Remove closed segments past retention.ms / retention.bytes / retention.topic.bytes.")
_job_command("roll", "Merge small files into segments of about segment.bytes (dataChange=false).")
_job_command("compact", "Keep the latest record per key in closed segments of compacted topics.")
_job_command("vacuum", "Delete files removed from the table longer ago than file.delete.delay.ms.")
_job_command("replicate", "Copy missing commits and files to every follower site, in version order (needs sites).")


@jobs_app.command("journal-sweep", help="Delete journal objects of fenced generations (nodes gone, their topics taken "
                                        "over) whose entries are all in their tables; fences stay.")
def journal_sweep(dry_run: bool = typer.Option(False, "--dry-run", help="print the plan, change nothing")) -> None:
    _run_job("journal-sweep", None, dry_run)
