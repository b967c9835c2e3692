"""Object requests of one steady-state produce commit on S3, counted by the latency proxy.

A produce is acknowledged on the node journal (one PUT of its object, deleted once in the table); the table
commit behind it is two round trips: the data, then the commit file, put only if its version is free. No
reads: the writer's snapshot is authoritative for its own table. In layout 2 (every new topic)
the flush is one object whatever the partition count, so a commit is two requests (the target of the
issue "Object storage as the design point": at most 3). A layout 1 table (partitioned by `partition`,
as tables created before layout 2 are) still takes one PUT per partition written, in parallel.
"""

from __future__ import annotations

from collections import Counter

import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.log import CHECKPOINT_INTERVAL, TopicLog
from lakelog.platform.segments.segment import TableLayout
from lakelog.platform.storage import Storage
from lakelog.settings import Settings
from log_check import assert_topic_intact

pytestmark = pytest.mark.s3

WARM_UP_COMMITS = 3  # the first commit of a node may read the table's log; later ones do not


@pytest.mark.parametrize(("layout", "partitions", "data_puts"), [
    (TableLayout.INTAKE, 8, 1), (TableLayout.INTAKE, 64, 1), (TableLayout.PARTITIONED, 8, 8)])
def test_a_steady_state_produce_commit_is_its_data_puts_and_one_commit_put(
        s3_proxy, layout: TableLayout, partitions: int, data_puts: int) -> None:
    root = s3_proxy.root()
    # The catalog reuses an empty table: created here, it keeps the layout asked for.
    TopicLog.create_table(Storage.open(root, s3_proxy.options), "counted", layout)
    broker = Broker(Settings(root=root, storage=s3_proxy.options, linger_ms=5))
    try:
        broker.create_topic("counted", partitions)
        assert broker.topic_log("counted").layout is layout
        batch = [Record(f"v{p}".encode(), partition=p) for p in range(partitions)]  # every partition
        for _ in range(WARM_UP_COMMITS):
            broker.produce("counted", batch)
        with s3_proxy.counter.measure() as counted:
            broker.produce("counted", batch)  # acknowledged on the journal, then its table committed
        assert broker.topic_log("counted").version % CHECKPOINT_INTERVAL != 0  # steady state: no checkpoint
        journal = [r.kind for r in counted.requests if "/_journal/" in r.target]
        table = Counter(r.kind for r in counted.requests if "/_journal/" not in r.target and r.kind != "delete")
        assert journal == ["put_data"], counted.describe()  # the journal object
        assert table == {"put_data": data_puts, "put_log": 1}, counted.describe()
        assert [r.kind for r in counted.requests].count("delete") <= 1  # the journal object, once in the table
    finally:
        broker.close()
    offsets = assert_topic_intact(root, "counted", s3_proxy.options)
    assert {p: len(o) for p, o in offsets.items()} == {p: WARM_UP_COMMITS + 1 for p in range(partitions)}


def test_a_reopening_node_reads_the_slices_cache_not_every_footer(s3_proxy) -> None:
    root = s3_proxy.root()
    commits = CHECKPOINT_INTERVAL + 5  # the cache is written at the checkpoint of version 25
    with Broker(Settings(root=root, storage=s3_proxy.options, linger_ms=0)) as broker:
        broker.create_topic("cached", 8)
        for i in range(commits - 1):  # version 0 is the table's creation
            broker.produce("cached", [Record(f"{i}".encode(), partition=p) for p in range(8)])
        written = {p: broker.topic_log("cached").segments(p) for p in range(8)}
    with Broker(Settings(root=root, storage=s3_proxy.options)) as reopened:
        with s3_proxy.counter.measure() as counted:
            reopened_log = reopened.topic_log("cached")
        footers = [r for r in counted.requests if r.kind == "get" and r.target.endswith(".parquet")
                   and "/_delta_log/" not in r.target and "/_lakelog/" not in r.target]
        cache = [r for r in counted.requests if "/_lakelog/" in r.target]
        assert {p: reopened_log.segments(p) for p in range(8)} == written
    assert len(cache) == 1
    # Footers only of files the cache does not name: those written after it (at most the 4 after version 25).
    assert len(footers) <= commits - 1 - CHECKPOINT_INTERVAL, counted.describe()


def _data_objects(counted) -> list:  # type: ignore[no-untyped-def]
    return [r for r in counted.requests if "/_delta_log/" not in r.target and "/_lakelog/" not in r.target]


def test_a_node_follows_another_writers_appends_with_gets_of_the_next_commit(s3_proxy) -> None:
    """A node that does not write the topic (a consumer's node in a cluster) finds new commits by a GET of
    the next version: nothing new is one request; an append of 8 partitions is the commit (which names the
    slices of its shared file) and the GET that finds no next version. No LIST, no footer, no snapshot
    load; then a read of the small new file is one GET."""
    root = s3_proxy.root()
    with Broker(Settings(root=root, storage=s3_proxy.options, linger_ms=0)) as writer, \
            Broker(Settings(root=root, storage=s3_proxy.options)) as follower:
        writer.create_topic("followed", 8)
        writer.produce("followed", [Record(b"first", partition=p) for p in range(8)])
        followed = follower.topic_log("followed")
        followed.refresh()
        with s3_proxy.counter.measure() as idle:
            assert followed.refresh() is False
        assert [(r.kind, r.target.rsplit("/", 1)[-1]) for r in idle.requests] == \
            [("get", f"{followed.version + 1:020d}.json")], idle.describe()

        writer.produce("followed", [Record(f"second-{p}".encode(), key=b"k", partition=p) for p in range(8)])
        with s3_proxy.counter.measure() as counted:
            assert followed.refresh() is True
        assert followed.version == writer.topic_log("followed").version
        kinds = sorted(r.kind for r in counted.requests)
        assert kinds == ["get", "get"], counted.describe()  # the commit (its slices with it), the next version
        assert not _data_objects(counted)  # no footer read
        with s3_proxy.counter.measure() as reads:
            assert followed.read(5, 1, 10).column("value").to_pylist() == [b"second-5"]
        assert [r.kind for r in reads.requests] == ["get"], reads.describe()  # a small file: whole, no HEAD
        for p in range(8):
            assert followed.log_end_offset(p) == 2
            assert followed.read(p, 1, 10).column("value").to_pylist() == [f"second-{p}".encode()]
        assert followed.segments(3) == writer.topic_log("followed").segments(3)
    assert_topic_intact(root, "followed", s3_proxy.options)


def test_a_commit_that_removes_files_is_loaded_through_the_snapshot(s3_proxy) -> None:
    """A maintenance commit (here the roll of the shared files) is not an append: the follower loads the
    snapshot (a LIST of the log) and its index names the rolled files, not the removed ones."""
    from lakelog.spark_jobs.jobs import run_job  # noqa: PLC0415 (Spark's module is heavy; only this test needs it)

    root = s3_proxy.root()
    with Broker(Settings(root=root, storage=s3_proxy.options, linger_ms=0)) as writer, \
            Broker(Settings(root=root, storage=s3_proxy.options)) as follower:
        writer.create_topic("rolled", 4)
        for i in range(3):
            writer.produce("rolled", [Record(f"{i}-{p}".encode(), partition=p) for p in range(4)])
        followed = follower.topic_log("rolled")
        assert all(s.shared for s in followed.segments(0))
        run_job("roll", writer, None)
        with s3_proxy.counter.measure() as counted:
            assert followed.refresh() is True
        assert any(r.kind == "list" for r in counted.requests), counted.describe()
        assert followed.segments(2) == writer.topic_log("rolled").segments(2)
        assert not any(s.shared for s in followed.segments(2))
        assert followed.read(2, 0, 10).column("value").to_pylist() == [f"{i}-2".encode() for i in range(3)]
    assert_topic_intact(root, "rolled", s3_proxy.options)
