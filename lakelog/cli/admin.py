"""`lakelog admin`: replication admin, leader election and the replica report."""

from __future__ import annotations

import json

import typer

from lakelog.cli.common import broker

admin_app = typer.Typer(help="Replication admin: leader election and replica lag.", no_args_is_help=True)


@admin_app.command("elect-leader")
def admin_elect_leader(
    topic: str,
    site: str | None = typer.Option(None, "--site", help="the site to promote (default: an in-sync follower)"),
    unclean: bool = typer.Option(False, "--unclean", help="promote an out-of-sync replica, losing what it lacks"),
) -> None:
    """Move a topic's leadership to another site: clean (in-sync only) unless --unclean."""
    with broker() as b:
        election = b.elect_leader(topic, site, unclean)
    if election.warning:
        typer.echo(f"warning: {election.warning}", err=True)
    state = election.state
    typer.echo(json.dumps({"topic": topic, "leader": state.leader, "leader_epoch": state.leader_epoch,
                           "isr": list(state.isr), "previous_leader": election.previous.leader}))


@admin_app.command("replicas")
def admin_replicas(topic: str) -> None:
    """Replica placement, leader, in-sync set and each follower's lag in commits and per partition."""
    with broker() as b:
        report = b.replica_report(topic)
    typer.echo(json.dumps(report, indent=2))
