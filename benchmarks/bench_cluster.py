"""Scale-out benchmarks (issue 11): one `lakelog serve` node vs three on one local root, failover after a
SIGKILL, and the liveness traffic of the nodes on the loopback S3 endpoint.

Everything runs on this machine: the nodes, `hey` (the load generator, one per node, so that every node
gets an equal share of the connections, as behind a round-robin load balancer) and, for the S3 part,
moto's server and the counting proxy of tests/s3_latency.py. On 2 cores three nodes (plus hey) are
CPU-bound: the three-node figures measure the overhead of forwarding, not the gain of more machines.

Load: JSON produce requests of 100 keyed records (100-byte values), to topics of 8 and 64 partitions.
Closed loop at saturation (the same 12 connections in all, split evenly over the nodes), then an offered
rate (`hey -q`, the same total for one and three nodes: half of what one node sustained at saturation).

Bytes between nodes (issue 41, item 4): a non-leader writes the calls it takes to a forward object in the
store and sends the leader a reference; the three-node phases sum every node's `/metrics` counters
`lakelog_forward_request_bytes` + `lakelog_forward_answer_bytes` (node to node) over
`lakelog_produced_record_bytes` (keys and values of the produce calls the nodes took), judged <= 0.05.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import psutil
from rich.console import Console

from benchmarks.common import Figure, free_port, percentile, wait_ready

SUITE = "cluster"
REPO = Path(__file__).resolve().parents[1]
PARTITION_COUNTS = (8, 64)
RECORDS_PER_REQUEST = 100
VALUE = "v" * 100
CONNECTIONS = 12  # in all, split evenly over the nodes (hey cannot split them otherwise)
OFFERED_SHARE = 0.5  # the offered-rate phase: this share of one node's saturation rate, for both set-ups
CPU_TARGET = 0.8  # three nodes' records per CPU-second, as a share of one node's
NODE_BYTES_TARGET = 0.05  # bytes sent node to node per record byte produced, three nodes
TRAFFIC = ("lakelog_forward_request_bytes_total", "lakelog_forward_answer_bytes_total",
           "lakelog_produced_record_bytes_total")  # node-wide counters (no topic label)
FAILOVER_HEARTBEAT_MS, FAILOVER_SESSION_MS = 500, 3000


class Node:
    """One `lakelog serve` process (no maintenance jobs)."""

    def __init__(self, root: str, node_id: str, env: dict[str, str]) -> None:
        self.node_id = node_id
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full = {**os.environ, "LAKELOG_NODE_ID": node_id, "LAKELOG_JOBS_INTERVAL_S": "0",
                "LAKELOG_GROUP_INITIAL_REBALANCE_DELAY_MS": "0", "LAKELOG_KAFKA_PORT": "0", **env}
        self.proc = subprocess.Popen([sys.executable, "-m", "lakelog.cli", "--root", root, "serve", "--port",
                                      str(self.port), "--no-jobs"], cwd=REPO, env=full,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.process = psutil.Process(self.proc.pid)

    def wait_ready(self, deadline: float) -> None:
        wait_ready(self.url, self.proc, deadline, f"node {self.node_id}")

    def cpu_s(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def cluster(self, timeout: float = 5) -> dict:
        return httpx.get(self.url + "/v1/cluster", timeout=timeout).json()

    def metric(self, name: str, topic: str) -> float:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        found = re.search(rf'^{name}{{topic="{re.escape(topic)}"}} ([0-9.e+]+)$', text, re.M)
        return float(found.group(1)) if found else 0.0

    def counters(self, names: tuple[str, ...]) -> dict[str, float]:
        """Unlabelled counters of one /metrics scrape (0 when absent)."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        values = {}
        for name in names:
            found = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
            values[name] = float(found.group(1)) if found else 0.0
        return values

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_cluster(root: str, size: int, env: dict[str, str] | None = None) -> list[Node]:
    nodes = [Node(root, f"n{i}", env or {}) for i in range(size)]
    deadline = time.monotonic() + 90
    try:
        for node in nodes:
            node.wait_ready(deadline)
        while any(len(node.cluster()["nodes"]) != size for node in nodes):  # every node sees every node
            if time.monotonic() > deadline:
                raise RuntimeError("the nodes did not see each other")
            time.sleep(0.2)
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return nodes


def _body(seed: int) -> bytes:
    return orjson.dumps({"records": [{"key": f"key-{seed}-{i}", "value": VALUE}
                                     for i in range(RECORDS_PER_REQUEST)]})


@dataclass
class HeyRun:
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0


def _hey(url: str, seconds: float, connections: int, body_path: str, rate_per_connection: float | None,
         into: HeyRun) -> None:
    command = ["hey", "-z", f"{seconds:g}s", "-c", str(connections), "-m", "POST", "-T", "application/json",
               "-D", body_path, "-o", "csv"]
    if rate_per_connection:
        command += ["-q", f"{rate_per_connection:g}"]
    out = subprocess.run([*command, url], capture_output=True, text=True, timeout=seconds + 120).stdout
    # CSV: response-time,DNS+dialup,DNS,Request-write,Response-delay,Response-read,status-code,offset
    for line in out.splitlines()[1:]:
        fields = line.split(",")
        if len(fields) < 8:
            continue
        if fields[6] == "200":
            into.latencies_ms.append(float(fields[0]) * 1000)
        else:
            into.errors += 1


@dataclass
class Phase:
    """What one load phase measured, all nodes together."""

    seconds: float
    records: int
    errors: int
    cpu_s: float
    commits: int  # table versions written
    commits_by_node: dict[str, float]
    conflicts: float
    leader_ms: list[float]
    other_ms: list[float]
    forward_request_bytes: float  # node to node, all nodes: references (or calls) sent to the leader
    forward_answer_bytes: float  # and the leader's answers
    produced_bytes: float  # record bytes (keys and values) of the produce calls all nodes took

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def records_per_cpu_s(self) -> float:
        return self.records / self.cpu_s if self.cpu_s else float("nan")

    @property
    def commits_per_s(self) -> float:
        return self.commits / self.seconds

    @property
    def conflicts_per_1000(self) -> float:
        return 1000 * self.conflicts / self.commits if self.commits else float("nan")


def _version(root: str, topic: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(os.path.join(root, "topics", topic)).version()


def load_phase(nodes: list[Node], root: str, topic: str, seconds: float, body_path: str,
               total_rate: float | None = None) -> Phase:
    """One hey per node at once, CONNECTIONS split evenly; optionally an offered rate in requests/s in all."""
    leader = nodes[0].cluster()["topics"][topic]
    per_node = CONNECTIONS // len(nodes)
    rate = total_rate / CONNECTIONS if total_rate else None
    runs = {node.node_id: HeyRun() for node in nodes}
    commits0 = {n.node_id: n.metric("lakelog_delta_commits_total", topic) for n in nodes}
    conflicts0 = sum(n.metric("lakelog_delta_commit_conflicts_total", topic) for n in nodes)
    traffic0 = [n.counters(TRAFFIC) for n in nodes]
    version0 = _version(root, topic)
    cpu0 = sum(n.cpu_s() for n in nodes)
    started = time.perf_counter()
    threads = [threading.Thread(target=_hey, args=(f"{n.url}/v1/topics/{topic}/records", seconds, per_node,
                                                   body_path, rate, runs[n.node_id])) for n in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    cpu = sum(n.cpu_s() for n in nodes) - cpu0
    version = _version(root, topic)
    commits = {n.node_id: n.metric("lakelog_delta_commits_total", topic) - commits0[n.node_id] for n in nodes}
    conflicts = sum(n.metric("lakelog_delta_commit_conflicts_total", topic) for n in nodes) - conflicts0
    traffic = [n.counters(TRAFFIC) for n in nodes]
    moved = {name: sum(after[name] - before[name] for before, after in zip(traffic0, traffic)) for name in TRAFFIC}
    return Phase(elapsed, sum(len(r.latencies_ms) for r in runs.values()) * RECORDS_PER_REQUEST,
                 sum(r.errors for r in runs.values()), cpu, version - version0, commits, conflicts,
                 runs[leader].latencies_ms,
                 [ms for node_id, r in runs.items() if node_id != leader for ms in r.latencies_ms],
                 *(moved[name] for name in TRAFFIC))


def bench_scale(console: Console, work: str, size: int, seconds: float, body_path: str,
                offered: dict[int, float]) -> dict[tuple[int, str], Phase]:
    """Saturation and offered-rate phases per topic on a fresh cluster of `size` nodes. `offered` (requests/s
    per partition count) is filled in by the one-node run and reused by the three-node one."""
    root = os.path.join(work, f"root-{size}")
    nodes = start_cluster(root, size)
    results: dict[tuple[int, str], Phase] = {}
    try:
        for partitions in PARTITION_COUNTS:
            topic = f"p{partitions}"
            httpx.post(nodes[0].url + "/v1/topics", json={"name": topic, "partitions": partitions},
                       timeout=30).raise_for_status()
        for partitions in PARTITION_COUNTS:
            topic = f"p{partitions}"
            console.log(f"cluster: {size} node(s), {partitions} partitions: warm-up, saturation, offered rate")
            load_phase(nodes, root, topic, 2, body_path)  # every node opens the topic, the leader warms up
            results[(partitions, "saturation")] = saturated = load_phase(nodes, root, topic, seconds, body_path)
            if partitions not in offered:
                offered[partitions] = OFFERED_SHARE * saturated.records_per_s / RECORDS_PER_REQUEST
            results[(partitions, "offered")] = load_phase(nodes, root, topic, seconds, body_path,
                                                          offered[partitions])
        results[(0, "leaders")] = nodes[0].cluster()["topics"]  # type: ignore[assignment]
    finally:
        for node in nodes:
            node.stop()
    return results


def _scale_figures(one: dict, three: dict, offered: dict[int, float]) -> list[Figure]:
    figures: list[Figure] = []
    leaders = three[(0, "leaders")]
    for partitions in PARTITION_COUNTS:
        topic = f"p{partitions}"
        for phase in ("saturation", "offered"):
            a, b = one[(partitions, phase)], three[(partitions, phase)]
            load = (f"{CONNECTIONS} connections, closed loop" if phase == "saturation" else
                    f"{offered[partitions] * RECORDS_PER_REQUEST:,.0f} records/s offered")
            label = f"{partitions} partitions, {load}"
            figures += [
                Figure(SUITE, f"1 node: records/s ({label})", a.records_per_s, "records/s",
                       note=f"{a.errors} errors"),
                Figure(SUITE, f"3 nodes: records/s ({label})", b.records_per_s, "records/s",
                       ratio=b.records_per_s / a.records_per_s, note=f"ratio to 1 node; {b.errors} errors"),
                Figure(SUITE, f"1 node: produce p50 ({label})", percentile(a.leader_ms, 50), "ms"),
                Figure(SUITE, f"1 node: produce p99 ({label})", percentile(a.leader_ms, 99), "ms"),
                Figure(SUITE, f"3 nodes: produce p50 through the leader ({label})", percentile(b.leader_ms, 50),
                       "ms", ratio=percentile(b.leader_ms, 50) / percentile(a.leader_ms, 50),
                       note=f"ratio to 1 node; leader {leaders[topic]}"),
                Figure(SUITE, f"3 nodes: produce p99 through the leader ({label})", percentile(b.leader_ms, 99),
                       "ms", ratio=percentile(b.leader_ms, 99) / percentile(a.leader_ms, 99), note="ratio to 1 node"),
                Figure(SUITE, f"3 nodes: produce p50 through a non-leader ({label})", percentile(b.other_ms, 50),
                       "ms", ratio=percentile(b.other_ms, 50) / percentile(b.leader_ms, 50),
                       note="ratio to through the leader; both non-leaders pooled"),
                Figure(SUITE, f"3 nodes: produce p99 through a non-leader ({label})", percentile(b.other_ms, 99),
                       "ms", ratio=percentile(b.other_ms, 99) / percentile(b.leader_ms, 99),
                       note="ratio to through the leader; both non-leaders pooled"),
                Figure(SUITE, f"1 node: commits/s of the topic ({label})", a.commits_per_s, "commits/s",
                       note=f"{a.records / max(a.commits, 1):,.0f} records/commit"),
                Figure(SUITE, f"3 nodes: commits/s of the topic ({label})", b.commits_per_s, "commits/s",
                       ratio=b.commits_per_s / a.commits_per_s,
                       note=f"ratio to 1 node; {b.records / max(b.commits, 1):,.0f} records/commit; "
                            "table versions by node: " +
                            ", ".join(f"{k} {v:.0f}" for k, v in b.commits_by_node.items())),
            ]
            for n, p in (("1 node", a), ("3 nodes", b)):
                figures.append(Figure(SUITE, f"{n}: commit conflicts that forced a rewrite ({label})",
                                      p.conflicts_per_1000, "per 1,000 commits", "0 in steady state",
                                      p.conflicts == 0, note=f"{p.conflicts:.0f} of {p.commits} commits"))
            target = CPU_TARGET * a.records_per_cpu_s
            figures += [
                Figure(SUITE, f"1 node: records per CPU-second of the node ({label})", a.records_per_cpu_s,
                       "records/CPU-s", note=f"{a.cpu_s:.1f} CPU-s in {a.seconds:.1f} s (hey not counted)"),
                Figure(SUITE, f"3 nodes: records per CPU-second of all nodes ({label})", b.records_per_cpu_s,
                       "records/CPU-s", f">= {CPU_TARGET}x 1 node ({target:,.0f})", b.records_per_cpu_s >= target,
                       b.records_per_cpu_s / a.records_per_cpu_s,
                       f"ratio to 1 node; {b.cpu_s:.1f} CPU-s in {b.seconds:.1f} s; 3 nodes + hey on 2 cores: "
                       "CPU-bound"),
            ]
    return figures


def _node_bytes_figures(three: dict) -> list[Figure]:
    """Bytes sent node to node per record byte produced, each three-node phase and all of them together."""
    figures: list[Figure] = []
    phases = [(partitions, phase) for partitions in PARTITION_COUNTS for phase in ("saturation", "offered")]
    for key in [*phases, None]:
        chosen = [three[k] for k in phases] if key is None else [three[key]]
        request, answer, produced = (sum(getattr(p, a) for p in chosen) for a in
                                     ("forward_request_bytes", "forward_answer_bytes", "produced_bytes"))
        ratio = (request + answer) / produced if produced else float("nan")
        label = "all phases" if key is None else f"{key[0]} partitions, {key[1]}"
        figures.append(Figure(
            SUITE, f"3 nodes: bytes sent node to node per byte produced ({label})", ratio, "bytes/byte",
            f"<= {NODE_BYTES_TARGET}", ratio <= NODE_BYTES_TARGET, ratio / NODE_BYTES_TARGET,
            f"ratio to the target; {request:,.0f} request + {answer:,.0f} answer bytes node to node, "
            f"{produced:,.0f} record bytes produced (keys and values), all nodes; defaults (forward by reference)"))
    return figures


def bench_failover(console: Console, work: str) -> list[Figure]:
    """SIGKILL the leader of a topic; produce through a survivor and poll both survivors' GET /v1/cluster."""
    root = os.path.join(work, "root-failover")
    env = {"LAKELOG_BROKER_HEARTBEAT_INTERVAL_MS": str(FAILOVER_HEARTBEAT_MS),
           "LAKELOG_BROKER_SESSION_TIMEOUT_MS": str(FAILOVER_SESSION_MS)}
    nodes = start_cluster(root, 3, env)
    try:
        httpx.post(nodes[0].url + "/v1/topics", json={"name": "fo", "partitions": 8}, timeout=30).raise_for_status()
        time.sleep(0.5)
        leader_id = nodes[0].cluster()["topics"]["fo"]
        leader = next(n for n in nodes if n.node_id == leader_id)
        survivors = [n for n in nodes if n is not leader]
        body = _body(0)
        with httpx.Client(timeout=30) as client:
            for _ in range(10):  # warm: the survivor forwards to the leader
                client.post(f"{survivors[0].url}/v1/topics/fo/records", content=body,
                            headers={"content-type": "application/json"}).raise_for_status()
        console.log(f"cluster: failover, SIGKILL of {leader_id} (leader of the topic)")
        dropped: dict[str, float] = {}
        produced: list[float] = []
        failures = [0]
        new_leader: dict[str, str] = {}
        killed_at = [0.0]
        stop = time.monotonic() + 4 * FAILOVER_SESSION_MS / 1000 + 10

        def watch(node: Node) -> None:
            while time.monotonic() < stop and node.node_id not in dropped:
                try:
                    view = node.cluster(timeout=2)
                    if leader_id not in [n["node_id"] for n in view["nodes"]]:
                        dropped[node.node_id] = time.monotonic() - killed_at[0]
                        new_leader[node.node_id] = view["topics"].get("fo", "?")
                except httpx.HTTPError:
                    pass
                time.sleep(0.02)

        def produce() -> None:
            with httpx.Client(timeout=15) as client:
                while time.monotonic() < stop and not produced:
                    sent = time.monotonic()
                    try:
                        response = client.post(f"{survivors[0].url}/v1/topics/fo/records", content=body,
                                               headers={"content-type": "application/json"})
                        if response.status_code == 200:
                            produced.append(time.monotonic() - killed_at[0])
                            produced.append(sent - killed_at[0])
                            return
                    except httpx.HTTPError:
                        pass
                    failures[0] += 1
                    time.sleep(0.02)

        killed_at[0] = time.monotonic()
        leader.proc.send_signal(signal.SIGKILL)
        leader.proc.wait()
        threads = [threading.Thread(target=watch, args=(n,)) for n in survivors] + [threading.Thread(target=produce)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for node in nodes:
            node.stop()
    limit = 2 * FAILOVER_SESSION_MS
    settings = f"heartbeat {FAILOVER_HEARTBEAT_MS} ms, session timeout {FAILOVER_SESSION_MS} ms"
    produce_ms = produced[0] * 1000 if produced else float("nan")
    views_ms = [dropped.get(n.node_id, float("nan")) * 1000 for n in survivors]
    served = max([produce_ms, *views_ms])
    figures = [
        Figure(SUITE, "failover: SIGKILL of the leader to the first produce succeeding through a survivor",
               produce_ms, "ms", note=f"{settings}; {failures[0]} failed attempts before"),
    ]
    for node, ms in zip(survivors, views_ms):
        figures.append(Figure(SUITE, f"failover: SIGKILL to GET /v1/cluster on survivor {node.node_id} no longer "
                                     "listing the killed node", ms, "ms",
                              note=f"{settings}; new leader of the topic: {new_leader.get(node.node_id, '?')}"))
    figures.append(Figure(SUITE, "failover: SIGKILL to the topic served again and all survivors' views settled",
                          served, "ms", f"<= 2x session timeout ({limit:,} ms)", served <= limit,
                          served / FAILOVER_SESSION_MS, f"ratio to the session timeout; {settings}"))
    return figures


def run(console: Console, quick: bool = False) -> list[Figure]:
    if shutil.which("hey") is None:
        return [Figure(SUITE, "cluster benchmarks", float("nan"), "", note="hey not installed")]
    seconds = 4 if quick else 8
    work = tempfile.mkdtemp(prefix="lakelog-bench-cluster-")
    body_path = os.path.join(work, "body.json")
    Path(body_path).write_bytes(_body(1))
    offered: dict[int, float] = {}
    figures: list[Figure] = []
    try:
        one = bench_scale(console, work, 1, seconds, body_path, offered)
        three = bench_scale(console, work, 3, seconds, body_path, offered)
        figures += _scale_figures(one, three, offered)
        figures += _node_bytes_figures(three)
        figures += bench_failover(console, work)
        try:
            from benchmarks.bench_cluster_s3 import bench_s3  # it uses this module's cluster

            figures += bench_s3(console, quick)
        except Exception as exc:  # the S3 part is a bonus: say why it is missing rather than lose the rest
            console.log(f"[yellow]cluster: S3 part failed: {exc!r}")
            figures.append(Figure(SUITE, "liveness requests per node (design: 1 PUT + 1 LIST per heartbeat "
                                         "interval)", float("nan"), "", note=f"not measured: {exc!r}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return figures


if __name__ == "__main__":  # pragma: no cover
    for figure in run(Console(stderr=True), quick="--quick" in sys.argv):
        print(figure)
