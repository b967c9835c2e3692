"""`make bench`: run the benchmark suites and write benchmarks/RESULTS.md.

Usage: python -m benchmarks.run [--only core,http,spark] [--quick]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.common import Figure, machine

SUITES = {"core": "benchmarks.bench_core", "http": "benchmarks.bench_http", "spark": "benchmarks.bench_spark"}
RESULTS = Path(__file__).with_name("RESULTS.md")


def _fmt(value: float) -> str:
    if value != value:  # NaN
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.3g}"


def write_results(figures: list[Figure], command: str, seconds: float) -> None:
    lines = [
        "# Benchmark results",
        "",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- Machine: {machine()}",
        f"- Command: `{command}` ({seconds:,.0f} s)",
        "- Every figure measured is listed, met or not. Ratios compare our path with its raw ceiling measured"
        " in the same run.",
        "",
        "| suite | figure | value | unit | ratio | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        met = "" if f.met is None else ("yes" if f.met else "**no**")
        ratio = "" if f.ratio is None else f"{f.ratio:.2f}x"
        note = f" ({f.note})" if f.note else ""
        lines.append(f"| {f.suite} | {f.name}{note} | {_fmt(f.value)} | {f.unit} | {ratio} | {f.target} | {met} |")
    RESULTS.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default=",".join(SUITES))
    parser.add_argument("--quick", action="store_true", help="smaller runs, for a smoke test")
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    figures: list[Figure] = []
    started = time.perf_counter()
    for name in [s.strip() for s in args.only.split(",") if s.strip()]:
        try:
            module = importlib.import_module(SUITES[name])
        except ModuleNotFoundError as exc:
            console.log(f"[yellow]suite {name} skipped: {exc}")
            continue
        with console.status(f"running {name} benchmarks"):
            figures += module.run(console, quick=args.quick)
    table = Table("suite", "figure", "value", "unit", "ratio", "target", "met")
    for f in figures:
        table.add_row(f.suite, f.name, _fmt(f.value), f.unit, "" if f.ratio is None else f"{f.ratio:.2f}x",
                      f.target, "" if f.met is None else str(f.met))
    console.print(table)
    command = "make bench" + (f" BENCH_ARGS='{' '.join(argv or sys.argv[1:])}'" if (argv or sys.argv[1:]) else "")
    write_results(figures, command, time.perf_counter() - started)
    console.log(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
