"""The `lakelog` command: topics, groups, produce, consume, serve, jobs.

This module holds the typer `app`, its global options (`main`, kept in `common.State`) and the console
entry point `run()`; each command group lives in a module of its own: `topics.py`, `records.py`
(produce, consume), `serve.py`, `groups.py`, `share.py` (share groups, through a running server's HTTP API),
`jobs.py`, `admin.py`, their shared helpers in `common.py`.

Errors print one line (`error: CODE: message`) and exit 1.
"""

from __future__ import annotations

import sys

import typer

from lakelog.cli import admin, groups, jobs, records, serve, share, topics
from lakelog.cli.common import State, settings
from lakelog.observability import configure_logging
from lakelog.platform.errors import LakelogError
from lakelog.platform.storage import STORAGE_ERRORS, Storage, describe_storage_error

__all__ = ["State", "app", "main", "run"]

app = typer.Typer(help="lakelog: Kafka's log model stored as Delta Lake tables.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
app.add_typer(topics.topics_app, name="topics")
app.command()(records.produce)
app.command()(records.consume)
app.command()(serve.serve)
app.add_typer(groups.groups_app, name="groups")
app.add_typer(share.share_app, name="share")
app.add_typer(jobs.jobs_app, name="jobs")
app.add_typer(admin.admin_app, name="admin")


@app.callback()
def main(
    root: str | None = typer.Option(None, "--root", envvar="LAKELOG_ROOT",
                                       help="Root URI: a local folder (default ./data) or s3://bucket/prefix"),
    log_level: str = typer.Option("WARNING", "--log-level", envvar="LAKELOG_LOG_LEVEL"),
) -> None:
    State.root = root
    State.log_level = log_level
    configure_logging(log_level)


def run() -> None:
    """Console entry point: typed errors become one line and exit code 1."""
    try:
        app(standalone_mode=True)
    except LakelogError as exc:
        typer.echo(f"error: {exc.code}: {exc.message}", err=True)
        sys.exit(1)
    except STORAGE_ERRORS as exc:  # the store failed after opening: still one line naming root and cause
        config = settings()
        cause = describe_storage_error(Storage.open(config.root, config.storage), exc)
        typer.echo(f"error: KAFKA_STORAGE_ERROR: {cause}", err=True)
        sys.exit(1)
