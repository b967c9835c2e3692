"""The catalog held in memory (catalog/table.py), on S3 (moto's server behind the counting proxy): a node
loads it from the newest snapshot and the commits after it, not from every file; follows other nodes'
changes by reading only their commits; and its view is the table's, as any Delta reader sees it."""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from lakelog.platform import Broker, Record
from lakelog.platform.catalog.catalog import Catalog
from lakelog.platform.catalog.table import SNAPSHOT_DIR, SNAPSHOT_INTERVAL, snapshot_name
from lakelog.platform.delta.control_table import latest_rows, read_control_table
from lakelog.platform.errors import TopicAlreadyExists
from lakelog.platform.layout import CATALOG_TABLE
from lakelog.platform.storage import Storage
from lakelog.settings import Settings
from tests.patience import STUCK_S

pytestmark = pytest.mark.s3

AFTER_SNAPSHOT = 6  # changes committed after the snapshot's version


def _wait_for(check, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + STUCK_S
    while not check():
        assert time.monotonic() < deadline, f"no {what}"
        time.sleep(0.05)


def _as_delta_reads_it(storage: Storage) -> dict[str, tuple[int, int, bool]]:
    table = DeltaTable(storage.uri(CATALOG_TABLE), storage_options=storage.delta_options())
    rows = latest_rows(read_control_table(storage, table), ["name"], ["generation"]).to_pylist()
    return {r["name"]: (r["generation"], r["partitions"], r["deleted"]) for r in rows}


def test_a_node_loads_the_catalog_from_its_snapshot_and_the_commits_after(s3_proxy) -> None:
    root = s3_proxy.root()
    storage = Storage.open(root, s3_proxy.options)
    uri = storage.uri(CATALOG_TABLE)
    with Broker(Settings(root=root, storage=s3_proxy.options)) as broker:
        for i in range(SNAPSHOT_INTERVAL):  # versions 1..50: the commit of version 50 writes the snapshot
            broker.create_topic(f"t{i:03d}", 1 + i % 3)
        _wait_for(lambda: snapshot_name(SNAPSHOT_INTERVAL) in storage.list_names(f"{uri}/{SNAPSHOT_DIR}"),
                  "snapshot")
        broker.add_partitions("t001", 9)
        broker.alter_topic_config("t002", {"retention.ms": 1000})
        broker.delete_topic("t003")
        for i in range(AFTER_SNAPSHOT - 3):
            broker.create_topic(f"late{i}", 2)
        expected = {t.name: t for t in broker.list_topics()}

    with s3_proxy.counter.measure() as counted:
        loaded = Catalog(storage, create=False)
    assert {t.name: t for t in loaded.list_topics()} == expected
    assert loaded.version == SNAPSHOT_INTERVAL + AFTER_SNAPSHOT
    data_reads = [r for r in counted.requests if r.kind == "get" and r.target.endswith(".parquet")
                  and "/_delta_log/" not in r.target and f"/{SNAPSHOT_DIR}/" not in r.target]
    assert len(data_reads) == AFTER_SNAPSHOT, counted.describe()  # the files of the commits after the snapshot
    # The table's existence, the snapshot's listing and read, the commits after it and the one not there.
    assert counted.total <= 3 + 2 * AFTER_SNAPSHOT + 1, counted.describe()
    assert _as_delta_reads_it(storage) == {
        name: (row["generation"], row["partitions"], row["deleted"]) for name, row in loaded._table.rows.items()}
    assert DeltaTable(uri, storage_options=storage.delta_options()).version() == loaded.version


def test_a_node_follows_another_nodes_changes_by_their_commits_alone(s3_proxy) -> None:
    root = s3_proxy.root()
    with Broker(Settings(root=root, storage=s3_proxy.options)) as first, \
            Broker(Settings(root=root, storage=s3_proxy.options)) as second:
        for i in range(20):
            first.create_topic(f"t{i}", 1)
        second.list_topics()
        with s3_proxy.counter.measure() as idle:
            second.catalog.refresh()
        assert [r.kind for r in idle.requests] == ["get"], idle.describe()  # the next version: not there
        first.create_topic("new", 4)
        first.delete_topic("t5")
        with s3_proxy.counter.measure() as counted:
            names = [t.name for t in second.list_topics()]
        assert "new" in names and "t5" not in names and len(names) == 20
        # Two commits and their two files, and the GET that finds no third: no listing, no older file.
        assert sorted(r.kind for r in counted.requests) == ["get"] * 5, counted.describe()
        # A change made on a view that is behind conflicts (its version is taken) and is decided again on the
        # latest view: refused, and the other node's topic is intact.
        first.create_topic("both", 2)
        with pytest.raises(TopicAlreadyExists):
            second.create_topic("both", 1)
        assert second.topic("both").partitions == 2
        assert first.produce("both", [Record(b"x", partition=1)]).offsets.tolist() == [0]
