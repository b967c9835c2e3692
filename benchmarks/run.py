"""`make bench`: run the benchmark suites and write benchmarks/RESULTS.md.

Usage: python -m benchmarks.run [--only core,http,spark,replication,s3,cluster,kafka,journal,local,groups,share,typed] [--quick]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.common import Figure, machine

SUITES = {"core": "benchmarks.bench_core", "http": "benchmarks.bench_http", "spark": "benchmarks.bench_spark",
          "replication": "benchmarks.bench_replication", "s3": "benchmarks.bench_s3",
          "cluster": "benchmarks.bench_cluster", "kafka": "benchmarks.bench_kafka",
          "journal": "benchmarks.bench_journal", "local": "benchmarks.bench_local",
          "groups": "benchmarks.bench_groups", "share": "benchmarks.bench_share", "typed": "benchmarks.bench_typed"}
RESULTS = Path(__file__).with_name("RESULTS.md")
STORE = Path(__file__).with_name("results.json")


def _fmt(value: float) -> str:
    if value != value:  # NaN
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.3g}"


def write_results(figures: list[Figure], suites: list[str], command: str, seconds: float) -> None:
    """Merge this run's suites into results.json and regenerate RESULTS.md from it."""
    saved = json.loads(STORE.read_text()) if STORE.exists() else {}
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for suite in suites:
        saved[suite] = {"date": stamp, "machine": machine(), "command": command, "seconds": round(seconds),
                        "figures": [f.as_dict() for f in figures if f.suite == suite]}
    STORE.write_text(json.dumps(saved, indent=1) + "\n")
    lines = [
        "# Benchmark results",
        "",
        "Every figure measured is listed, met or not. Ratios compare our path with its raw ceiling (or the",
        "stated baseline) measured in the same run. Regenerate with `make bench`; `make bench BENCH_ARGS=",
        "\"--only core\"` reruns one suite and keeps the others' last results.",
    ]
    for suite, run in saved.items():
        lines += [
            "", f"## {suite}", "",
            f"- Date: {run['date']}", f"- Machine: {run['machine']}",
            f"- Command: `{run['command']}` ({run['seconds']:,} s for the run)", "",
            "| figure | value | unit | ratio | target | met |",
            "|---|---|---|---|---|---|",
        ]
        for f in run["figures"]:
            met = "" if f["met"] is None else ("yes" if f["met"] else "**no**")
            ratio = "" if f["ratio"] is None else f"{f['ratio']:.2f}x"
            note = f" ({f['note']})" if f["note"] else ""
            lines.append(f"| {f['name']}{note} | {_fmt(f['value'])} | {f['unit']} | {ratio} | {f['target']} | {met} |")
    RESULTS.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default=",".join(SUITES))
    parser.add_argument("--quick", action="store_true", help="smaller runs, for a smoke test")
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    figures: list[Figure] = []
    started = time.perf_counter()
    ran: list[str] = []
    for name in [s.strip() for s in args.only.split(",") if s.strip()]:
        try:
            module = importlib.import_module(SUITES[name])
        except ModuleNotFoundError as exc:
            console.log(f"[yellow]suite {name} skipped: {exc}")
            continue
        with console.status(f"running {name} benchmarks"):
            figures += module.run(console, quick=args.quick)
        ran.append(name)
    table = Table("suite", "figure", "value", "unit", "ratio", "target", "met")
    for f in figures:
        table.add_row(f.suite, f.name, _fmt(f.value), f.unit, "" if f.ratio is None else f"{f.ratio:.2f}x",
                      f.target, "" if f.met is None else str(f.met))
    console.print(table)
    command = "make bench" + (f" BENCH_ARGS='{' '.join(argv or sys.argv[1:])}'" if (argv or sys.argv[1:]) else "")
    write_results(figures, ran, command, time.perf_counter() - started)
    console.log(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
