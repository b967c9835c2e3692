"""The cluster suite's S3 part (issue 11): three nodes on the loopback S3 endpoint behind the counting proxy
of tests/s3_latency.py: the requests of an idle cluster by kind, and the object requests per commit of a
produce through the leader and through a non-leader."""

from __future__ import annotations

import statistics
import time
from urllib.parse import unquote

import httpx
import orjson
from rich.console import Console

from benchmarks.bench_cluster import PARTITION_COUNTS, SUITE, VALUE, start_cluster
from benchmarks.common import Figure, s3_behind_proxy

LIVENESS_IDLE_S = 10.0
BUCKET = "lakelog-bench-cluster"


def _liveness_request(target: str) -> bool:
    return "_cluster/nodes" in unquote(target)


def _topic_request(target: str, topic: str) -> bool:
    return f"/topics/{topic}/" in unquote(target)


def bench_s3(console: Console, quick: bool) -> list[Figure]:
    """Three nodes on the loopback S3 endpoint behind the counting proxy (no added delay): the requests of
    an idle cluster by kind, then object requests per commit for a produce through the leader and through a
    non-leader, one record per partition per call, calls one at a time."""
    from tests.s3_latency import KINDS

    figures: list[Figure] = []
    with s3_behind_proxy(BUCKET) as proxy:
        env = {"AWS_ENDPOINT_URL": proxy.endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
               "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
        console.log("cluster: 3 nodes on the loopback S3 endpoint (default heartbeat 2,000 ms)")
        nodes = start_cluster(f"s3://{BUCKET}/root", 3, env)
        try:
            for partitions in PARTITION_COUNTS:
                httpx.post(nodes[0].url + "/v1/topics", json={"name": f"p{partitions}", "partitions": partitions},
                           timeout=60).raise_for_status()
            time.sleep(3)  # creation settled
            console.log(f"cluster: idle for {LIVENESS_IDLE_S:g} s, counting requests")
            with proxy.counter.measure() as idle:
                time.sleep(LIVENESS_IDLE_S)
            live = [r for r in idle.requests if _liveness_request(r.target)]
            by_kind = {k: sum(1 for r in live if r.kind == k) / 3 for k in KINDS}
            interval_s = 2.0
            spelled = ", ".join(f"{k} {v:.3g}" for k, v in by_kind.items() if v)
            design = 2 * LIVENESS_IDLE_S / interval_s
            figures.append(Figure(
                SUITE, f"liveness requests per node, idle {LIVENESS_IDLE_S:g} s, heartbeat 2,000 ms "
                       "(_cluster/nodes only)", sum(by_kind.values()), f"requests / {LIVENESS_IDLE_S:g} s",
                f"design: {design:g} (1 PUT + 1 LIST per interval; +2 if a round more falls in the window)",
                sum(by_kind.values()) <= design + 2,
                note=spelled + f" (the heartbeat PUT counts as put_data); "
                               f"{sum(by_kind.values()) / LIVENESS_IDLE_S:.2f} requests/s per node"))
            others = [r for r in idle.requests if not _liveness_request(r.target)]
            catalog = sum(1 for r in others if "_catalog/" in unquote(r.target))
            figures.append(Figure(
                SUITE, f"other object requests per node, idle {LIVENESS_IDLE_S:g} s", len(others) / 3,
                f"requests / {LIVENESS_IDLE_S:g} s",
                note=", ".join(f"{k} {n / 3:.3g}" for k in KINDS
                               if (n := sum(1 for r in others if r.kind == k))) +
                     f"; {catalog / 3:.3g} of them read the topic catalog's log (other nodes' topic admin)"))
            leaders = nodes[0].cluster()["topics"]
            per_commit: dict[tuple[int, str], float] = {}
            calls = 5 if quick else 15
            for partitions in PARTITION_COUNTS:
                topic = f"p{partitions}"
                leader = next(n for n in nodes if n.node_id == leaders[topic])
                other = next(n for n in nodes if n is not leader)
                body = orjson.dumps({"records": [{"value": VALUE, "partition": p} for p in range(partitions)]})
                for name, node in (("the leader", leader), ("a non-leader", other)):
                    with httpx.Client(base_url=node.url, timeout=60) as client:
                        for _ in range(3):  # warm-up
                            client.post(f"/v1/topics/{topic}/records", content=body,
                                        headers={"content-type": "application/json"}).raise_for_status()
                        per_call = []  # the topic table's requests of each call, all nodes'
                        for _ in range(calls):
                            with proxy.counter.measure() as counted:
                                client.post(f"/v1/topics/{topic}/records", content=body,
                                            headers={"content-type": "application/json"}).raise_for_status()
                            per_call.append([r for r in counted.requests if _topic_request(r.target, topic)])
                    # Steady state: calls whose commit wrote no checkpoint (one in 25 commits does).
                    steady = [c for c in per_call if not any("checkpoint" in r.target for r in c)] or per_call
                    total = statistics.median(len(c) for c in steady)
                    kinds = {k: statistics.median(sum(1 for r in c if r.kind == k) for c in steady) for k in KINDS}
                    mean = statistics.mean(len(c) for c in per_call)
                    per_commit[(partitions, name)] = total
                    figures.append(Figure(
                        SUITE, f"object requests per commit, {partitions} partitions, produce through {name} "
                               "(3 nodes, steady state)", total, "requests",
                        note=", ".join(f"{k} {v:g}" for k, v in kinds.items() if v) +
                             f"; median of {len(steady)} calls of one record per partition without a checkpoint; "
                             f"mean of all {calls}, checkpoints included: {mean:.1f}; "
                             "all nodes' requests to the topic's table"))
                added = per_commit[(partitions, "a non-leader")] - per_commit[(partitions, "the leader")]
                figures.append(Figure(
                    SUITE, f"object requests per commit added by forwarding, {partitions} partitions", added,
                    "requests", "0 (forwarding happens before the commit)", added <= 0.5,
                    note="steady state, through a non-leader minus through the leader; one node's figures: "
                         "the s3 suite"))
        finally:
            for node in nodes:
                node.stop()
    return figures
