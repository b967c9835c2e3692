"""SIGKILL a server with the node journal on between the journal write and the table commit, restart it:
every acknowledged record is in its table once, at the offset it was acknowledged with (the restart
replays the node's journal), and the tables pass the offset scan. Local root and S3 (moto)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from deltalake import DeltaTable

from log_check import assert_topic_intact
from lakelog.platform.storage import Storage
from tests.conftest import s3_env
from tests.http.conftest import ProcessServer, fetch_all
from tests.patience import STUCK_S

pytestmark = pytest.mark.slow
TOPICS = [f"jc{n}" for n in range(5)]
PARTITIONS = 2
JOURNAL_ENV: dict[str, str] = {}


def produce(url: str, n: int, acked: dict[str, tuple[str, int, int]], lock: threading.Lock,
            stop: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=STUCK_S) as c:
        batch = 0
        while not stop.is_set():
            topic = TOPICS[(n + batch) % len(TOPICS)]
            values = [f"{n}-{batch}-{i}" for i in range(20)]
            batch += 1
            try:
                response = c.post(f"/v1/topics/{topic}/records",
                                  json={"records": [{"key": v, "value": v} for v in values]})
            except httpx.HTTPError:
                return  # the server died: this batch is not acknowledged
            if response.status_code == 200:
                with lock:
                    for v, o in zip(values, response.json()["offsets"]):
                        acked[v] = (topic, o["partition"], o["offset"])


def table_rows(root: str, storage: dict[str, str], topic: str) -> int:
    store = Storage.open(root, storage)
    table = DeltaTable(store.uri("topics", topic), storage_options=store.delta_options())
    return table.to_pyarrow_table(columns=["offset"]).num_rows


def run_journal_crash(root: str, env: dict[str, str]) -> None:
    storage = {name.lower(): value for name, value in env.items() if name.startswith("AWS_")}
    env = {**env, **JOURNAL_ENV}
    server = ProcessServer(root, env).start()
    acked: dict[str, tuple[str, int, int]] = {}
    lock, stop = threading.Lock(), threading.Event()
    try:
        with server.client() as c:
            for topic in TOPICS:  # never committed by the interval before the kill
                response = c.post("/v1/topics", json={"name": topic, "partitions": PARTITIONS,
                                                      "config": {"table.commit.interval.ms": 600_000}})
                assert response.status_code == 201, response.text
        threads = [threading.Thread(target=produce, args=(server.url, n, acked, lock, stop)) for n in range(3)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + STUCK_S
        while len(acked) < 600:
            assert time.monotonic() < deadline, "the load did not get going"
            time.sleep(0.05)
        server.kill()
        stop.set()
        for t in threads:
            t.join(STUCK_S)
    finally:
        server.terminate()
    # Killed between the journal and the tables: the acknowledged records are in the journal only.
    assert sum(table_rows(root, storage, t) for t in TOPICS) == 0
    restarted = ProcessServer(root, env, port=server.port).start()
    try:
        with restarted.client() as c:
            found: dict[str, tuple[str, int, int]] = {}
            for topic in TOPICS:
                for p in range(PARTITIONS):
                    records = fetch_all(c, topic, p)
                    assert [r["offset"] for r in records] == list(range(len(records))), f"{topic}-{p} not dense"
                    for r in records:
                        assert r["value"] not in found, f"record {r['value']} written twice"
                        found[r["value"]] = (topic, p, r["offset"])
            missing = [v for v in acked if v not in found]
            assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
            moved = [v for v, where in acked.items() if found[v] != where]
            assert not moved, f"acknowledged records not at their offsets: {moved[:3]}"
    finally:
        restarted.terminate()
    # The replay committed them before the restarted node took a call; the scan reads the tables directly.
    for topic in TOPICS:
        stored = assert_topic_intact(root, topic, storage)
        mine = {(p, o) for t, p, o in acked.values() if t == topic}
        assert mine <= {(p, o) for p, offsets in stored.items() for o in offsets}
    assert "replayed into their tables" in restarted.log_tail(20_000)


def test_journal_sigkill_local_root(tmp_path: Any) -> None:
    run_journal_crash(str(tmp_path / "root"), {})


@pytest.mark.s3
def test_journal_sigkill_s3_root(moto_endpoint: str) -> None:
    run_journal_crash("s3://lakelog-crash/journal", s3_env(moto_endpoint))
