"""Fast on a local folder too (issue 41, item 2): single-record produce over HTTP to one `lakelog serve` process
on a local folder root, at the default settings (linger.ms 0: the node journal's group commit; table commits
every 1 s), judged against the framework's own ceiling measured the same way in the same run.

- Saturation: `hey` on GET /healthz, then on single-record produce, the same connections and duration, in
  three rounds; the produce rate is judged at >= 0.7x /healthz's by the median of the rounds' ratios (this
  machine's pace drifts by up to 20% from one run to the next). The server's CPU per request (from
  /proc) is reported beside each, a figure the drift moves less.
- Offered rate: 500 single-record produce requests/s in all (`hey -q` is per connection), p99 judged <= 30 ms;
  GET /healthz offered the same just before is its reference (hey's connections send in bursts).
- Nothing lost: every 2xx answer hey counted (warm-up included) is a row of the topic's table once the server
  stopped cleanly (SIGTERM), each (partition, offset) once.

The server runs with no linger or commit override, on a fresh temp folder, bound to 127.0.0.1 on a free port;
its Kafka listener is on a free port too and its maintenance jobs are off (`--no-jobs`: a Spark scheduler
process is not the produce path). `hey` and the server share this machine's cores.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx
import orjson
from rich.console import Console

from benchmarks.common import Figure, free_port, wait_ready

SUITE = "local"
REPO = Path(__file__).resolve().parents[1]
TOPIC = "local"
VALUE = "v" * 100
SATURATION_CONNECTIONS = 16  # the same for /healthz and produce
OFFERED_TOTAL = 500  # requests/s in all
OFFERED_CONNECTIONS = 50  # 10 requests/s each: a request may take 100 ms before hey's pace falls behind
RATE_TARGET = 0.7  # produce requests/s as a share of /healthz's
ROUNDS = 3
P99_TARGET_MS = 30.0


class Server:
    """One `lakelog serve` process at the defaults on `root`."""

    def __init__(self, root: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")}  # nothing overridden
        self.proc = subprocess.Popen([sys.executable, "-m", "lakelog.cli", "--root", root, "serve", "--host",
                                      "127.0.0.1", "--port", str(self.port), "--kafka-port", "0", "--no-jobs"],
                                     cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(self.url, self.proc, time.monotonic() + 60, "the benchmark server")
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> int | None:
        """SIGTERM and wait: the exit code, or None when it had to be killed."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.terminate()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


@dataclass
class Hey:
    """What hey's summary said."""

    requests_per_s: float = float("nan")
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0  # requests with no HTTP answer (hey's "Error distribution")

    @property
    def ok(self) -> int:
        return sum(n for code, n in self.statuses.items() if 200 <= code < 300)

    @property
    def not_ok(self) -> int:
        return sum(self.statuses.values()) - self.ok + self.errors


def hey(url: str, seconds: float, connections: int, body_path: str | None = None,
        rate_per_connection: float | None = None) -> Hey:
    command = ["hey", "-z", f"{seconds:g}s", "-c", str(connections)]
    if rate_per_connection:
        command += ["-q", f"{rate_per_connection:g}"]
    if body_path:
        command += ["-m", "POST", "-T", "application/json", "-D", body_path]
    out = subprocess.run([*command, url], capture_output=True, text=True, timeout=seconds + 120).stdout
    result = Hey()
    if found := re.search(r"Requests/sec:\s+([\d.]+)", out):
        result.requests_per_s = float(found.group(1))
    if found := re.search(r"50% in ([\d.]+) secs", out):
        result.p50_ms = float(found.group(1)) * 1000
    if found := re.search(r"99% in ([\d.]+) secs", out):
        result.p99_ms = float(found.group(1)) * 1000
    result.statuses = {int(code): int(n) for code, n in re.findall(r"^\s*\[(\d{3})\]\s+(\d+) responses", out, re.M)}
    errors = out.split("Error distribution:", 1)
    if len(errors) == 2:
        result.errors = sum(int(n) for n in re.findall(r"^\s*\[(\d+)\]", errors[1], re.M))
    return result


def server_cpu_s(pid: int) -> float:
    """CPU seconds (user and system) the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(server: Server, run: Callable[[], Hey]) -> tuple[Hey, float]:
    """A hey run, and the server's CPU µs per request it answered."""
    before = server_cpu_s(server.proc.pid)
    summary = run()
    spent = server_cpu_s(server.proc.pid) - before
    return summary, spent * 1e6 / max(summary.ok + summary.not_ok, 1)


def table_rows(root: str) -> tuple[int, int]:
    """Rows of the topic's table and distinct (partition, offset) pairs among them."""
    from deltalake import DeltaTable

    table = DeltaTable(os.path.join(root, "topics", TOPIC)).to_pyarrow_table(columns=["partition", "offset"])
    pairs = {(p, o) for p, o in zip(table.column("partition").to_pylist(), table.column("offset").to_pylist())}
    return table.num_rows, len(pairs)


def _stopped(exit_code: int | None) -> str:
    if exit_code is None:
        return "killed (no exit 60 s after SIGTERM)"
    if exit_code in (0, -signal.SIGTERM):  # uvicorn raises the signal again once shut down
        return "clean"
    return f"exit code {exit_code}"


def run(console: Console, quick: bool = False, seconds: float | None = None) -> list[Figure]:
    if shutil.which("hey") is None:
        return [Figure(SUITE, "local folder benchmarks", float("nan"), "",
                       note="hey not installed (apt-get install hey)")]
    seconds = seconds or (4 if quick else 10)
    warm = min(2.0, seconds)
    work = tempfile.mkdtemp(prefix="lakelog-bench-local-")
    root = os.path.join(work, "root")
    body_path = os.path.join(work, "body.json")
    Path(body_path).write_bytes(orjson.dumps({"records": [{"key": "k1", "value": VALUE}]}))
    produce_runs: list[Hey] = []
    ceilings: list[tuple[Hey, float]] = []  # per round: hey's summary, server CPU µs a request
    rounds: list[tuple[Hey, float]] = []
    exit_code: int | None = 0
    try:
        server = Server(root)
        try:
            httpx.post(server.url + "/v1/topics", json={"name": TOPIC}, timeout=30).raise_for_status()  # defaults
            records = f"{server.url}/v1/topics/{TOPIC}/records"
            console.log(f"local: warm-up, then /healthz and single-record produce at saturation, {ROUNDS} rounds "
                        f"({SATURATION_CONNECTIONS} connections, {seconds:g} s each)")
            produce_runs.append(hey(records, warm, SATURATION_CONNECTIONS, body_path))
            for _ in range(ROUNDS):  # side by side, round after round: this machine's pace drifts by 20%
                ceilings.append(measured(server, lambda: hey(f"{server.url}/healthz", seconds, SATURATION_CONNECTIONS)))
                rounds.append(measured(server, lambda: hey(records, seconds, SATURATION_CONNECTIONS, body_path)))
                produce_runs.append(rounds[-1][0])
            console.log(f"local: /healthz, then single-record produce, at {OFFERED_TOTAL} requests/s offered")
            # hey -q paces each connection on its own ticker, so the connections' requests come in bursts: the
            # framework's own tail at this rate is the reference for produce's
            offered_ceiling = hey(f"{server.url}/healthz", seconds, OFFERED_CONNECTIONS, None,
                                  OFFERED_TOTAL / OFFERED_CONNECTIONS)
            offered = hey(records, seconds, OFFERED_CONNECTIONS, body_path, OFFERED_TOTAL / OFFERED_CONNECTIONS)
            produce_runs.append(offered)
        finally:
            exit_code = server.stop()
        rows, distinct = table_rows(root)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    ratios = [run.requests_per_s / ceiling.requests_per_s for (run, _), (ceiling, _) in zip(rounds, ceilings)]
    middle = sorted(range(ROUNDS), key=lambda i: ratios[i])[ROUNDS // 2]  # the round of the median ratio
    (saturated, produce_cpu), (ceiling, ceiling_cpu) = rounds[middle], ceilings[middle]
    ratio = ratios[middle]
    per_round = ", ".join(f"{r:.2f}" for r in ratios)
    answered = sum(r.ok for r in produce_runs)
    refused = sum(r.not_ok for r in produce_runs)
    load = f"{SATURATION_CONNECTIONS} connections, closed loop, {seconds:g} s (hey)"
    return [
        Figure(SUITE, f"framework ceiling: GET /healthz, {load}, the median round of {ROUNDS}", ceiling.requests_per_s,
               "requests/s", note=f"reference; p99 {ceiling.p99_ms:.1f} ms; server CPU {ceiling_cpu:.0f} µs a request"),
        Figure(SUITE, f"single-record produce at saturation, {load}, the round after", saturated.requests_per_s,
               "requests/s", f">= {RATE_TARGET}x /healthz ({RATE_TARGET * ceiling.requests_per_s:,.0f})",
               ratio >= RATE_TARGET, ratio,
               f"ratio to GET /healthz, the median of the rounds' ({per_round}); p50 {saturated.p50_ms:.1f} ms, "
               f"p99 {saturated.p99_ms:.1f} ms; {saturated.not_ok} not 2xx; server CPU {produce_cpu:.0f} µs a "
               f"request ({produce_cpu / ceiling_cpu:.2f}x /healthz's)"),
        Figure(SUITE, f"single-record produce at {OFFERED_TOTAL} requests/s offered, p50", offered.p50_ms, "ms",
               note=f"{OFFERED_CONNECTIONS} connections x {OFFERED_TOTAL / OFFERED_CONNECTIONS:g}/s (hey -q)"),
        Figure(SUITE, f"single-record produce at {OFFERED_TOTAL} requests/s offered, p99", offered.p99_ms, "ms",
               f"<= {P99_TARGET_MS:g}", offered.p99_ms <= P99_TARGET_MS, offered.p99_ms / P99_TARGET_MS,
               f"ratio to the target; {offered.not_ok} not 2xx; GET /healthz offered the same just before: "
               f"p50 {offered_ceiling.p50_ms:.1f} ms, p99 {offered_ceiling.p99_ms:.1f} ms"),
        Figure(SUITE, f"single-record produce at {OFFERED_TOTAL} requests/s offered: served", offered.requests_per_s,
               "requests/s", ratio=offered.requests_per_s / OFFERED_TOTAL,
               note="ratio to the offered rate (below 1: hey's pace fell behind, the p99 is flattered)"),
        Figure(SUITE, "records lost: 2xx answers minus rows of the topic table after a clean stop", answered - rows,
               "records", "0, each offset once", rows == answered == distinct,
               note=f"{answered:,} answered 2xx (warm-up included), {rows:,} rows, {distinct:,} distinct "
                    f"(partition, offset); {refused} not 2xx; server stop: {_stopped(exit_code)}"),
    ]


if __name__ == "__main__":  # pragma: no cover
    seconds_arg = next((float(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--seconds=")), None)
    for figure in run(Console(stderr=True), quick="--quick" in sys.argv, seconds=seconds_arg):
        print(figure)
