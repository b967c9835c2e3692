"""The node journal over a real server: produce across 30 topics makes one
journal object per flush for all of them, far fewer PUTs than a commit per topic; acknowledged records
are fetched over HTTP at once, before any table commit, and are in each topic's Delta table (read as any
Delta reader does) after `table.commit.interval.ms`; the journal objects are deleted once committed.
Local root and S3 (moto behind the counting proxy)."""

from __future__ import annotations

import os
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import httpx
import pytest
from deltalake import DeltaTable

from log_check import assert_topic_intact
from lakelog.platform.storage import Storage
from tests.http.conftest import ThreadServer, create_topic, end_offsets, fetch_all
from tests.patience import STUCK_S

TOPICS = 30
REQUESTS = 240
RATE = 100.0  # produce requests a second, round-robin over the topics
INTERVAL_MS = 3_000


def table_rows(server: ThreadServer, topic: str) -> int:
    storage = Storage.open(server.root, server.settings.storage)
    table = DeltaTable(storage.uri("topics", topic), storage_options=storage.delta_options())
    return table.to_pyarrow_table(columns=["offset"]).num_rows


def produce_load(server: ThreadServer, topics: list[str]) -> tuple[dict[str, tuple[str, int, int]], float]:
    """REQUESTS calls of one record at RATE over the topics; value -> (topic, partition, offset), and the
    seconds the load took. Every 10th record is fetched over HTTP as soon as it is acknowledged; those of
    the first round (well within the commit interval) are checked not to be in the table yet."""
    acked: dict[str, tuple[str, int, int]] = {}
    broker = server.app.state.services.broker

    def one(i: int, c: httpx.Client) -> None:
        topic, value = topics[i % len(topics)], f"v{i}"
        sent = time.monotonic()
        response = c.post(f"/v1/topics/{topic}/records", json={"records": [{"key": f"k{i}", "value": value}]})
        assert response.status_code == 200, response.text
        where = response.json()["offsets"][0]
        p, offset = where["partition"], where["offset"]
        acked[value] = (topic, p, offset)
        # A topic's first record waits the interval from its acknowledgement (a slow machine may take that
        # long to get here: then nothing is said).
        if i < len(topics) and time.monotonic() - sent < INTERVAL_MS / 2000:
            assert broker.topic_log(topic).log_end_offset(p) <= offset, "in the table before the interval"
        if i % 10 == 0:
            got = c.get(f"/v1/topics/{topic}/partitions/{p}/records", params={"offset": offset, "max_records": 1})
            assert got.status_code == 200, got.text
            assert [(r["offset"], r["value"]) for r in got.json()["records"]] == [(offset, value)]

    start = time.monotonic()
    with server.client() as c, ThreadPoolExecutor(8) as pool:
        futures = []
        for i in range(REQUESTS):
            time.sleep(max(0.0, start + i / RATE - time.monotonic()))
            futures.append(pool.submit(one, i, c))
        for future in futures:
            future.result()
    return acked, time.monotonic() - start


def run_many_topics(server: ThreadServer, puts: Callable[[], int] | None) -> dict[str, Any]:
    broker = server.app.state.services.broker
    assert broker.journal is not None
    topics = [f"j{n}" for n in range(TOPICS)]
    with server.client() as c:
        for topic in topics:
            create_topic(c, topic, 2, **{"table.commit.interval.ms": INTERVAL_MS})
    before = puts() if puts else 0
    journal_puts, table_commits = broker.journal.writer.puts, broker.journal.committer.commits
    acked, seconds = produce_load(server, topics)
    figures = {"requests": REQUESTS, "seconds": round(seconds, 2),
               "journal_objects": broker.journal.writer.puts - journal_puts,
               "table_commits_during_load": broker.journal.committer.commits - table_commits}
    if puts:
        figures["puts"] = puts() - before
    print(figures)
    # Acknowledged means fetchable now (from the leader's memory, or the table if committed meanwhile).
    with server.client() as c:
        for topic in topics[:5]:
            values = {r["value"] for p in range(2) for r in fetch_all(c, topic, p)}
            assert values == {v for v, (t, _, _) in acked.items() if t == topic}
            assert sum(end_offsets(c, topic)) == len(values)  # describe counts them too
    # Fewer objects than requests: one per flush for all topics, where the journal-off path makes a commit
    # (two PUTs) per request once topics outnumber the calls in a flush. How many calls share a flush depends
    # on the machine's speed (the benchmark measures it), so the bounds are those any speed keeps: a topic
    # commits its table at most once an interval, and every PUT is a journal object or a table commit's.
    assert figures["journal_objects"] < REQUESTS, figures
    intervals = math.ceil(seconds * 1000 / INTERVAL_MS) + 1
    assert figures["table_commits_during_load"] <= TOPICS * intervals, figures
    # ... and the node starts at most `journal_table_commit_rate` of them a second (one second's worth at
    # once), however many topics are due: the object requests do not grow with the topic count.
    rate = server.settings.journal_table_commit_rate
    assert 0 < rate < TOPICS * 1000 / INTERVAL_MS, "the test needs more topics due than the rate commits"
    assert figures["table_commits_during_load"] <= rate * seconds + max(1.0, rate), figures
    if puts:  # a commit's 2 PUTs (3 allowed), a topic's epoch claim, and commits in flight at the count
        explained = figures["journal_objects"] + 3 * figures["table_commits_during_load"] + 2 * TOPICS + 12
        assert figures["puts"] <= explained, figures
    # After the interval every acknowledged record is in its table, once, at its offset.
    deadline = time.monotonic() + STUCK_S
    while sum(table_rows(server, t) for t in topics) < len(acked):
        assert time.monotonic() < deadline, "the tables were not committed behind the journal"
        time.sleep(0.2)
    with server.client() as c:
        for topic in topics:
            stored = assert_topic_intact(server.root, topic, server.settings.storage)
            mine = {(p, o) for t, p, o in acked.values() if t == topic}
            assert {(p, o) for p, offsets in stored.items() for o in offsets} == mine
            for p in range(2):
                for r in fetch_all(c, topic, p):
                    assert acked[r["value"]] == (topic, p, r["offset"])
    # Every object but the generation's last is deleted once its topics committed.
    while len(journal_objects(server)) > 1:
        assert time.monotonic() < deadline, f"journal objects left: {journal_objects(server)}"
        time.sleep(0.2)
    return figures


def journal_objects(server: ThreadServer) -> list[str]:
    """The journal objects (a topic's epoch records, one small object per claim, stay)."""
    storage = Storage.open(server.root, server.settings.storage)
    return [f for f in storage.list_tree(storage.uri("_journal", "gens"))
            if not os.path.basename(f).startswith("_tmp")]


def test_thirty_topics_local(start_server: Callable[..., ThreadServer]) -> None:
    run_many_topics(start_server(journal_table_commit_rate=5), None)


@pytest.mark.s3
def test_thirty_topics_s3(start_server: Callable[..., ThreadServer], s3_proxy: Any) -> None:
    server = start_server(root=s3_proxy.root(), storage=s3_proxy.options, journal_table_commit_rate=5)

    def puts() -> int:
        counts = s3_proxy.counter.snapshot()
        return counts["put_data"] + counts["put_log"]

    run_many_topics(server, puts)
