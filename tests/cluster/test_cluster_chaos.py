"""Three `lakelog serve` processes on one root (a local folder, and S3 on the loopback endpoint), clients
spread round-robin over them: plain producers (keyed and unkeyed, acks=1 and all), an idempotent producer,
Idempotency-Key requests and a consumer group of three. One node is SIGKILLed mid-load; later another is
SIGSTOPped past its session timeout and then SIGCONTed. The same on a local root, and a rolling restart
(each node SIGTERMed and started again). Every produce is acknowledged on the nodes' journals.

At the end: every acknowledged record is in the topic once, at the offset it was acknowledged with, and
the offsets are dense; every retried idempotent batch was written once; the group consumed everything and
no committed offset went backwards; and every node agrees on the live nodes, which lead every topic and
coordinate every group.
"""

from __future__ import annotations

import itertools
import signal
import threading
import time
from typing import Any

import httpx
import pytest

from lakelog.client import Consumer
from log_check import assert_topic_intact
from tests.conftest import s3_env
from tests.cluster.cluster_nodes import SESSION_MS, Node, settled, views, wait_for, wait_until
from tests.patience import STUCK_S

pytestmark = pytest.mark.slow
TOPICS = {"orders": 6, "clicks": 4}
GROUP = "billing"
GROUP_CONFIG = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "fetch.wait.max.ms": 300,
                "request.timeout.ms": 4000, "default.api.timeout.ms": 60_000, "auto.offset.reset": "earliest",
                "enable.auto.commit": False}


class RoundRobin:
    """One client per node; each request goes to the next node, skipping for a while a node that did not
    answer (a load balancer's round robin with passive health checks)."""

    def __init__(self, nodes: list[Node]) -> None:
        self.clients = [httpx.Client(base_url=n.url, timeout=8) for n in nodes]
        self._next = itertools.count()
        self._down_until = [0.0] * len(nodes)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        """The answer, or None when the node did not answer (killed, stopped)."""
        now = time.monotonic()
        for _ in range(len(self.clients)):
            i = next(self._next) % len(self.clients)
            if self._down_until[i] <= now:
                break
        try:
            return self.clients[i].request(method, path, **kwargs)
        except httpx.HTTPError:
            self._down_until[i] = time.monotonic() + 5
            return None

    def close(self) -> None:
        for client in self.clients:
            client.close()


class Load:
    def __init__(self, nodes: list[Node], pause_s: float) -> None:
        self.nodes = nodes
        self.pause_s = pause_s  # between a producer's requests: the loopback S3 endpoint serves one at a time
        self.acked: dict[str, tuple[str, int, int]] = {}  # value -> (topic, partition, offset)
        self.sent_unacked: set[str] = set()
        self.idempotent_retries = 0
        self.key_mismatches: list[str] = []
        self.consumed: list[str] = []
        self.reads: list[tuple[int, str, int, int]] = []  # (consumer, topic, partition, offset), for failures
        self.commit_regressions: list[str] = []
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.producers = [threading.Thread(target=self._guard, args=(self.plain, n, acks, keyed))
                          for n, (acks, keyed) in enumerate([("1", True), ("all", False), ("1", False)])]
        self.producers.append(threading.Thread(target=self._guard, args=(self.idempotent,)))
        self.producers.append(threading.Thread(target=self._guard, args=(self.idempotency_keys,)))
        self.consumers = [threading.Thread(target=self._guard, args=(self.consume, i)) for i in range(3)]
        self.watcher = threading.Thread(target=self._guard, args=(self.watch_commits,))

    def start(self) -> None:
        for thread in [*self.producers, *self.consumers, self.watcher]:
            thread.start()

    def finish(self) -> None:
        """Stop producing, let the group catch up (its committed offsets at the log end), and stop; fails on
        any client thread's error."""
        self.stop_producing.set()
        for thread in self.producers:
            thread.join(120)
        lags: list[Any] = []
        rr = RoundRobin(self.nodes)
        try:
            wait_until(lambda: self._caught_up(rr, lags), STUCK_S,
                       lambda: f"the group to commit up to the log end: {lags[-1:]}")
        finally:
            rr.close()
        self.stop_consuming.set()
        for thread in [*self.consumers, self.watcher]:
            thread.join(120)
        assert not self.errors, f"{self.errors}\n{node_warnings(self.nodes)}"

    def _caught_up(self, rr: RoundRobin, lags: list[Any]) -> bool:
        response = rr.request("GET", f"/v1/groups/{GROUP}")
        if response is None or response.status_code != 200:
            lags.append(None if response is None else response.text)
            return False
        lags.append({(row["topic"], row["partition"]): row["lag"] for row in response.json()["offsets"]})
        return bool(lags[-1]) and not any(lags[-1].values())

    def _guard(self, target: Any, *args: Any) -> None:
        try:
            target(*args)
        except BaseException as exc:  # surfaced by the test's assertions
            self.errors.append(exc)

    def _ack(self, topic: str, values: list[str], response: httpx.Response) -> None:
        with self.lock:
            for value, at in zip(values, response.json()["offsets"]):
                self.acked[value] = (topic, at["partition"], at["offset"])

    def plain(self, n: int, acks: str, keyed: bool) -> None:
        """Never retries a value: an error leaves it unacknowledged (it may be in the log at most once)."""
        rr = RoundRobin(self.nodes)
        for batch in itertools.count():
            if self.stop_producing.is_set():
                break
            topic = "orders" if batch % 3 else "clicks"
            values = [f"p{n}-{batch}-{i}" for i in range(20)]
            records = [{"key": v if keyed else None, "value": v} for v in values]
            response = rr.request("POST", f"/v1/topics/{topic}/records", params={"acks": acks, "timeout_ms": 5000},
                                  json={"records": records})
            if response is not None and response.status_code == 200:
                self._ack(topic, values, response)
            else:
                assert response is None or response.json().get("retriable"), response.text
                self.sent_unacked.update(values)
                time.sleep(0.05)
            time.sleep(self.pause_s)
        rr.close()

    def idempotent(self) -> None:
        """One idempotent producer: a batch that fails is retried as it was, through the next node."""
        rr = RoundRobin(self.nodes)
        sequence = 0
        for batch in itertools.count():
            if self.stop_producing.is_set():
                break
            values = [f"idem-{batch}-{i}" for i in range(5)]
            body = {"producer_id": 4242, "producer_epoch": 0, "sequence": sequence,
                    "records": [{"key": v, "value": v} for v in values]}
            for attempt in itertools.count():
                response = rr.request("POST", "/v1/topics/orders/records", json=body)
                if response is not None and response.status_code == 200:
                    self._ack("orders", values, response)
                    break
                assert response is None or response.json().get("retriable"), response.text
                self.idempotent_retries += attempt == 0
                assert attempt < 200, ("an idempotent batch never landed; the last answer: "
                                       f"{None if response is None else (response.status_code, response.text[:300])}")
                time.sleep(0.1)
            sequence += len(values)
            time.sleep(self.pause_s)
        rr.close()

    def idempotency_keys(self) -> None:
        """Each request with its own Idempotency-Key, retried until it lands, then sent once more through
        another node: the answer must be the first one's."""
        rr = RoundRobin(self.nodes)
        for n in itertools.count():
            if self.stop_producing.is_set():
                break
            values = [f"key-{n}-{i}" for i in range(3)]
            kwargs = {"json": {"records": [{"value": v} for v in values]}, "headers": {"Idempotency-Key": f"k-{n}"}}
            for attempt in itertools.count():
                response = rr.request("POST", "/v1/topics/clicks/records", **kwargs)
                if response is not None and response.status_code == 200:
                    break
                assert attempt < 200, "an Idempotency-Key request never landed"
                time.sleep(0.1)
            self._ack("clicks", values, response)
            time.sleep(self.pause_s)
            for _ in range(20):
                again = rr.request("POST", "/v1/topics/clicks/records", **kwargs)
                if again is not None and again.status_code == 200:
                    if again.json()["offsets"] != response.json()["offsets"]:
                        self.key_mismatches.append(f"k-{n}")
                    break
                time.sleep(0.1)
        rr.close()

    def consume(self, i: int) -> None:
        consumer = Consumer(",".join(n.url for n in self.nodes[i:] + self.nodes[:i]),
                            {"group.id": GROUP, **GROUP_CONFIG})
        consumer.subscribe(list(TOPICS))
        idle_since = None
        uncommitted = False
        while True:
            messages = consumer.consume(200, 0.3)
            if messages:
                idle_since = None
                with self.lock:
                    self.consumed.extend(m.value().decode() for m in messages)
                    self.reads.extend((i, m.topic(), m.partition(), m.offset()) for m in messages)
            if messages or uncommitted:
                try:
                    consumer.commit(asynchronous=False)
                    uncommitted = False
                except Exception:  # a rebalance or a node going away: committed again at the next poll
                    uncommitted = True
            if not messages and self.stop_consuming.is_set():
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 3:
                    break
        consumer.close()

    def watch_commits(self) -> None:
        """Committed offsets, read through any node, never go backwards."""
        rr = RoundRobin(self.nodes)
        highest: dict[tuple[str, int], int] = {}
        while not self.stop_consuming.is_set():
            response = rr.request("GET", f"/v1/groups/{GROUP}/offsets")
            if response is not None and response.status_code == 200:
                for row in response.json()["offsets"]:
                    tp = (row["topic"], row["partition"])
                    if row["offset"] < highest.get(tp, -1):
                        self.commit_regressions.append(f"{tp}: {highest[tp]} -> {row['offset']}")
                    highest[tp] = max(highest.get(tp, -1), row["offset"])
            time.sleep(0.2)
        rr.close()


def run_chaos(root: str, env: dict[str, str], step: int, pause_s: float = 0.0) -> None:
    """`step`: how many more acknowledged records each phase waits for (fewer on the slower S3 endpoint)."""
    nodes = start_cluster(root, env)
    load = None
    try:
        load = Load(nodes, pause_s)
        load.start()
        wait_until(lambda: len(load.acked) > step and len(load.consumed) > step // 5, STUCK_S,
                   lambda: f"the load to get going ({len(load.acked)} acknowledged, {len(load.consumed)} consumed, "
                           f"errors: {load.errors[:2]})")

        killed, paused, live = nodes[0], nodes[1], nodes[1:]
        killed.kill()
        acked_at_kill = len(load.acked)
        wait_until(lambda: len(load.acked) > acked_at_kill + step, STUCK_S, "the load to go on without the killed node")

        paused.signal(signal.SIGSTOP)
        time.sleep(SESSION_MS / 1000 * 2)  # out of the cluster
        acked_while_paused = len(load.acked)
        wait_until(lambda: len(load.acked) > acked_while_paused + step // 3, STUCK_S,
                   lambda: f"the load to go on while a node is paused ({len(load.acked) - acked_while_paused} "
                           f"acknowledged since; client errors: {load.errors[:2]}):\n{node_warnings(nodes)}")
        paused.signal(signal.SIGCONT)
        wait_until(lambda: settled(live) is not None, STUCK_S, lambda: f"the paused node to rejoin: {cluster_views(live)}")
        acked_after = len(load.acked)
        wait_until(lambda: len(load.acked) > acked_after + step // 3, STUCK_S, "the load to go on after the pause")

        load.finish()

        cluster = wait_for(lambda: settled(live), lambda: f"the live nodes to agree: {views(live)}")
        assert set(cluster["topics"].values()) <= {n.name for n in live}
        assert set(cluster["groups"].values()) <= {n.name for n in live}
        described: list[httpx.Response] = []
        # A node taking the group over answers a retriable NOT_COORDINATOR for two heartbeats.
        wait_until(lambda: described.append(httpx.get(live[0].url + f"/v1/groups/{GROUP}", timeout=STUCK_S)) or
                   described[-1].status_code == 200, STUCK_S, lambda: described[-1].text)
        offsets = described[-1].json()["offsets"]
        assert sum(row["lag"] for row in offsets) == 0, offsets
    finally:
        stop_cluster(nodes, load)
    check_outcome(load, root, env)


def run_rolling_restart(root: str, env: dict[str, str], step: int) -> None:
    """Each node in turn: SIGTERM (it drains), then started again at its address, under load."""
    nodes = start_cluster(root, env)
    load = None
    try:
        load = Load(nodes, 0.0)
        load.start()
        wait_until(lambda: len(load.acked) > step and len(load.consumed) > step // 5, STUCK_S, "the load to get going")
        for node in nodes:
            node.terminate()
            acked = len(load.acked)
            wait_until(lambda: len(load.acked) > acked + step // 3, STUCK_S, f"the load to go on without {node.name}")
            node.start()
            wait_until(lambda: settled(nodes) is not None, STUCK_S, lambda: f"{node.name} to rejoin: {views(nodes)}")
        acked = len(load.acked)
        wait_until(lambda: len(load.acked) > acked + step // 3, STUCK_S, "the load to go on after the restarts")
        load.finish()  # clients saw retriable errors only: a plain producer asserts it on every answer
        wait_for(lambda: settled(nodes), lambda: f"the nodes to agree after the restarts: {views(nodes)}")
    finally:
        stop_cluster(nodes, load)
    check_outcome(load, root, env, retried_idempotent=False)


def check_outcome(load: Load, root: str, env: dict[str, str], retried_idempotent: bool = True) -> None:
    """Every acknowledged record once, where it was acknowledged; dense offsets; retries written once; the
    group consumed everything and its commits never went backwards."""
    options = {name.lower(): value for name, value in env.items() if name.startswith("AWS_")}
    stored: dict[str, tuple[str, int, int]] = {}
    for topic in TOPICS:
        assert_topic_intact(root, topic, options or None)
        for value, (partition, offset) in values_by_offset(root, topic, options or None).items():
            assert value not in stored, f"{value} written twice: {stored[value]} and {(topic, partition, offset)}"
            stored[value] = (topic, partition, offset)
    lost = [v for v in load.acked if v not in stored]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}"
    moved = [v for v, at in load.acked.items() if stored[v] != at]
    assert not moved, f"acknowledged at other offsets: {[(v, load.acked[v], stored[v]) for v in moved[:3]]}"
    strangers = set(stored) - set(load.acked) - load.sent_unacked
    assert not strangers, f"records nobody sent: {sorted(strangers)[:3]}"
    assert load.idempotent_retries > 0 or not retried_idempotent, "no idempotent batch was retried"
    assert not load.key_mismatches, f"Idempotency-Key retries answered with other offsets: {load.key_mismatches[:3]}"
    assert not load.commit_regressions, load.commit_regressions[:5]
    missing = set(load.acked) - set(load.consumed)
    assert not missing, (f"the group did not consume {len(missing)} acknowledged records, e.g. {sorted(missing)[:3]}; "
                         f"{skipped_reads(load, sorted(missing)[:3])}")


def skipped_reads(load: Load, values: list[str]) -> str:
    """For a failure message: where each value was acknowledged, and each consumer's reads of its partition
    around that offset (in the order the consumer got them)."""
    lines = []
    for value in values:
        topic, partition, offset = load.acked[value]
        lines.append(f"{value} at {topic}-{partition}@{offset}")
        for consumer in range(3):
            got = [o for c, t, p, o in load.reads if (c, t, p) == (consumer, topic, partition)]
            near = [o for o in got if abs(o - offset) <= 30]
            lines.append(f"  consumer {consumer}: {len(got)} reads, near it: {near}")
    return "\n".join(lines + [node_warnings(load.nodes)])


def node_warnings(nodes: list[Node]) -> str:
    """For failure messages: how many warnings each node logged, and its last five."""
    lines = []
    for node in nodes:
        warnings = [line for line in node.log_tail(10**7).splitlines()
                    if '"level": "warning"' in line or '"level": "error"' in line]
        lines.append(f"{node.name}: {len(warnings)} warnings, the last: {warnings[-5:]}")
    return "\n".join(lines)


def cluster_views(nodes: list[Node]) -> list[object]:
    """Each node's answer to GET /v1/cluster (its status and body), for failure messages."""
    found: list[object] = []
    for node in nodes:
        try:
            response = httpx.get(node.url + "/v1/cluster", timeout=5)
            found.append((node.name, response.status_code, response.text[:400]))
        except httpx.HTTPError as exc:
            found.append((node.name, repr(exc)))
    return found


def start_cluster(root: str, env: dict[str, str]) -> list[Node]:
    nodes = [Node(root, f"n{i}", env) for i in range(3)]
    for node in nodes:
        node.start()
    with httpx.Client(base_url=nodes[0].url, timeout=STUCK_S) as admin:
        for topic, partitions in TOPICS.items():
            assert admin.post("/v1/topics", json={"name": topic, "partitions": partitions}).status_code == 201
    wait_until(lambda: settled(nodes) is not None, STUCK_S, "three nodes to see each other")
    return nodes


def stop_cluster(nodes: list[Node], load: Load | None) -> None:
    if load is not None:
        load.stop_producing.set()
        load.stop_consuming.set()
    for node in nodes:
        if node.proc is not None and node.proc.poll() is None:
            node.signal(signal.SIGCONT)
        node.terminate()


def values_by_offset(root: str, topic: str, options: dict[str, str] | None) -> dict[str, tuple[int, int]]:
    """value -> (partition, offset), read from the table's files as any Delta reader would."""
    from deltalake import DeltaTable

    from lakelog.platform.storage import Storage

    store = Storage.open(root, options)
    table = DeltaTable(store.uri("topics", topic), storage_options=store.delta_options()).to_pyarrow_table(
        columns=["partition", "offset", "value"])
    found: dict[str, tuple[int, int]] = {}
    for partition, offset, value in zip(*(table.column(c).to_pylist() for c in ("partition", "offset", "value"))):
        text = value.decode()
        assert text not in found, f"{text} written twice"
        found[text] = (partition, offset)
    return found


def test_three_nodes_on_a_local_root_through_a_kill_and_a_pause(tmp_path: Any) -> None:
    """Produce acknowledged on each node's journal, tables committed behind it: what the killed node had
    acknowledged only in its journal is put into the tables by the node that takes each topic over."""
    run_chaos(str(tmp_path / "root"), {}, 1500)


def test_a_rolling_restart_of_three_nodes_under_load(tmp_path: Any) -> None:
    """Each node drains at its SIGTERM (its journal's entries committed, its generation sealed) while the
    others take its topics over under load."""
    run_rolling_restart(str(tmp_path / "root"), {}, 900)


@pytest.mark.s3
def test_three_nodes_on_s3_through_a_kill_and_a_pause(moto_endpoint: str) -> None:
    run_chaos("s3://lakelog-cluster/root", s3_env(moto_endpoint), 200, pause_s=0.3)
