"""SIGKILL under produce load, then restart: every acknowledged record is there at its offset, offsets are
dense, nothing is duplicated, and the group resumes from its committed offsets. Local root and S3 (moto)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from delta_readers import assert_duckdb_agrees
from log_check import assert_root_intact
from tests.conftest import s3_env
from tests.http.conftest import ProcessServer, fetch_all
from tests.patience import STUCK_S

pytestmark = pytest.mark.slow
TOPIC = "crash"
GROUP = "crash-group"
PARTITIONS = 3


class Load:
    """Producers and one consumer-group member running against a server until it dies."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.acked: dict[str, tuple[int, int]] = {}  # value -> (partition, offset)
        self.committed: dict[int, int] = {}  # partition -> last acknowledged commit
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.produce, args=(n,)) for n in range(3)]
        self.threads.append(threading.Thread(target=self.consume))

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def produce(self, n: int) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as c:
            batch = 0
            while not self.stop.is_set():
                values = [f"{n}-{batch}-{i}" for i in range(50)]
                batch += 1
                try:
                    response = c.post(f"/v1/topics/{TOPIC}/records",
                                      json={"records": [{"key": v, "value": v} for v in values]})
                except httpx.HTTPError:
                    return  # the server died: this batch is not acknowledged
                if response.status_code == 200:
                    with self.lock:
                        for v, o in zip(values, response.json()["offsets"]):
                            self.acked[v] = (o["partition"], o["offset"])

    def consume(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as c:
            try:
                joined = c.post(f"/v1/groups/{GROUP}/members", json={
                    "topics": [TOPIC], "auto.offset.reset": "earliest", "enable.auto.commit": False}).json()
                member = joined["member_id"]
                while not self.stop.is_set():
                    generation = c.post(f"/v1/groups/{GROUP}/members/{member}/heartbeat").json()["generation"]
                    records = c.get(f"/v1/groups/{GROUP}/members/{member}/records",
                                    params={"max_records": 200, "timeout_ms": 50}).json()["records"]
                    latest: dict[int, int] = {}
                    for r in records:
                        latest[r["partition"]] = r["offset"] + 1
                    if not latest:
                        continue
                    response = c.post(f"/v1/groups/{GROUP}/offsets", json={
                        "member_id": member, "generation": generation,
                        "offsets": [{"topic": TOPIC, "partition": p, "offset": o} for p, o in latest.items()]})
                    if response.status_code == 200:
                        with self.lock:
                            self.committed.update(latest)
            except (httpx.HTTPError, KeyError, ValueError):
                return


def run_crash(root: str, env: dict[str, str], load_seconds: float) -> None:
    server = ProcessServer(root, env).start()
    try:
        with server.client() as c:
            assert c.post("/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}).status_code == 201
        load = Load(server.url)
        load.start()
        deadline = time.monotonic() + STUCK_S
        while len(load.acked) < 2000 or not load.committed:
            assert time.monotonic() < deadline, "the load did not get going"
            time.sleep(0.05)
        time.sleep(load_seconds)
        server.kill()
        load.join()
    finally:
        server.terminate()
    assert load.acked and load.committed
    restarted = ProcessServer(root, env, port=server.port).start()  # the same address: the same node
    try:
        with restarted.client() as c:
            check_log(c, load.acked)
            check_group(c, load.committed)
    finally:
        restarted.terminate()
    storage = {name.lower(): value for name, value in env.items()}
    assert_root_intact(root, storage)
    # Another Delta reader (DuckDB's delta extension, on S3 too) sees the same rows and every acknowledged value.
    assert_duckdb_agrees(root, TOPIC, storage, acked={where: value.encode() for value, where in load.acked.items()})


def check_log(c: httpx.Client, acked: dict[str, tuple[int, int]]) -> None:
    found: dict[str, tuple[int, int]] = {}
    for p in range(PARTITIONS):
        records = fetch_all(c, TOPIC, p)
        assert [r["offset"] for r in records] == list(range(len(records))), f"offsets of partition {p} not dense"
        for r in records:
            assert r["value"] not in found, f"record {r['value']} written twice"
            found[r["value"]] = (p, r["offset"])
    missing = [v for v in acked if v not in found]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
    moved = [v for v, where in acked.items() if found[v] != where]
    assert not moved, f"acknowledged records not at their offsets: {moved[:3]}"


def check_group(c: httpx.Client, acked_commits: dict[int, int]) -> None:
    stored = {o["partition"]: o["offset"] for o in c.get(f"/v1/groups/{GROUP}/offsets").json()["offsets"]}
    for p, offset in acked_commits.items():
        assert stored[p] >= offset, f"acknowledged commit of partition {p} lost: {stored[p]} < {offset}"
    member = c.post(f"/v1/groups/{GROUP}/members", json={"topics": [TOPIC], "enable.auto.commit": False,
                                                        "auto.offset.reset": "earliest"}).json()["member_id"]
    c.post(f"/v1/groups/{GROUP}/members/{member}/heartbeat")
    first: dict[int, int] = {}
    for _ in range(20):
        for r in c.get(f"/v1/groups/{GROUP}/members/{member}/records", params={"max_records": 30}).json()["records"]:
            first.setdefault(r["partition"], r["offset"])
    for p, offset in first.items():
        assert offset == stored.get(p, 0), f"partition {p} resumed at {offset}, committed {stored.get(p, 0)}"


def test_sigkill_local_root(tmp_path: Any) -> None:
    run_crash(str(tmp_path / "root"), {}, 1.5)


@pytest.mark.s3
def test_sigkill_s3_root(moto_endpoint: str) -> None:
    run_crash("s3://lakelog-crash/root", s3_env(moto_endpoint), 1.5)
