"""What every command group shares: the global options' State, the node settings and broker they open,
the one-line failure, key=value options, the output format and Kafka-tool tables, a group coordinator.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

import typer

from lakelog.platform import Broker
from lakelog.platform.groups import GroupCoordinator
from lakelog.settings import Settings


class State:
    root: str | None = None
    log_level: str = "WARNING"


def settings(**overrides: Any) -> Settings:
    values = {k: v for k, v in overrides.items() if v is not None}
    if State.root:
        values["root"] = State.root
    return Settings(**values)


def broker(create: bool = False) -> Broker:
    """Commands that only read (or change what exists) create no catalog: a wrong --root says so."""
    opened = Broker(settings(), create_catalog=create)
    if opened.catalog.created:
        typer.echo(f"created a lakelog catalog at {opened.storage.root}", err=True)
    return opened


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def parse_pairs(pairs: list[str]) -> dict[str, str]:
    config = {}
    for pair in pairs:
        if "=" not in pair:
            fail(f"--config takes key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        config[key.strip()] = value.strip()
    return config


OUTPUT_FORMATS = ("table", "json")
OutputOption = typer.Option(None, "--output", "-o",
                            help="table or json (default: table on a terminal, json otherwise)")


def output_format(value: str | None) -> str:
    """The format asked for, else an aligned table on a terminal and JSON when piped."""
    if value is None:
        return "table" if sys.stdout.isatty() else "json"
    if value not in OUTPUT_FORMATS:
        fail(f"--output takes table or json, got {value!r}")
    return value


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Kafka-tool style: upper-case headers, aligned columns, '-' where there is no value."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in columns:
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    console = Console(width=10_000, height=100)  # never truncate a cell (a dumb terminal would mean 80)
    with console.capture() as captured:
        console.print(table)
    typer.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


@contextmanager
def group_coordinator() -> Iterator[GroupCoordinator]:
    """A coordinator on this process's broker: the committed offsets in storage, and no members (a
    running server's members live in its memory)."""
    with broker() as b:
        coordinator = GroupCoordinator(b, initial_rebalance_delay_ms=0)
        try:
            yield coordinator
        finally:
            coordinator.close()
