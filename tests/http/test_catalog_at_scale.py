"""The catalog at scale (issue 26, item 4): 10,000 topics on S3 (moto's server behind the counting proxy), a
server that lists and describes them, and a create of one more that takes the same few requests as the
first: its table's version 0, its log folder's listing and the catalog row's file, together; then the
catalog commit and the table's first checkpoint, together. Two round trips, whatever the topic count; alter
and delete three at most."""

from __future__ import annotations

from typing import Callable
from urllib.parse import quote

import pyarrow as pa
import pytest
from deltalake.transaction import Transaction

from lakelog.platform import Broker, Record
from lakelog.platform.catalog.table import CatalogTable
from lakelog.platform.clock import now_ms
from lakelog.platform.layout import CATALOG_TABLE, topic_path
from lakelog.platform.log import TopicLog
from lakelog.platform.storage import Storage
from lakelog.schemas import CATALOG_SCHEMA
from lakelog.settings import Settings
from tests.http.conftest import ThreadServer
from tests.s3_latency import Counted

pytestmark = pytest.mark.s3

TOPICS = 10_000
ONE_WAY_S = 0.1  # while the create is measured: round trips are told apart by when requests arrive


def _seed(storage: Storage, names: list[str]) -> None:
    """The topics' catalog rows in one commit (a create each would take minutes on moto), as the catalog
    writes them; tables for the few the test uses."""
    table = CatalogTable(storage, create=True)
    now = now_ms()
    rows = pa.Table.from_pylist([{"name": n, "generation": 1, "partitions": 1, "config": "{}", "deleted": False,
                                  "created": now, "updated": now} for n in names], schema=CATALOG_SCHEMA)
    assert table.commit(table.write_data(rows), rows, [Transaction(f"lakelog.topic.{n}", 1) for n in names])


def _catalog_or(topic: str, counted) -> list:  # type: ignore[no-untyped-def]
    """The requests of the catalog and of `topic`'s table. Not the server's other work: the group
    coordinator looks for new catalog versions every second (METADATA_CHECK_S), a GET of the next commit."""
    polls = {f"/{CATALOG_TABLE}/_delta_log/{v:020d}.json" for v in range(1, 10)}
    listed = quote(f"/{topic_path(topic)}/", safe="")  # a LIST names its prefix in the query
    return [r for r in counted.requests
            if (f"/{CATALOG_TABLE}/" in r.target or f"/{topic_path(topic)}/" in r.target or listed in r.target)
            and not (r.kind == "get" and any(r.target.endswith(p) for p in polls))]


def test_ten_thousand_topics_list_describe_and_one_more_create_in_two_round_trips(
        s3_proxy, start_server: Callable[..., ThreadServer]) -> None:
    root = s3_proxy.root()
    storage = Storage.open(root, s3_proxy.options)
    names = [f"t{i:05d}" for i in range(TOPICS)]
    _seed(storage, names)
    for name in ("t00000", "t09999"):
        TopicLog.create_table(storage, name)
    server = start_server(root=root, storage=s3_proxy.options)
    with server.client() as client:
        listed = client.get("/v1/topics")
        assert listed.status_code == 200, listed.text
        assert [t["name"] for t in listed.json()["topics"]] == names
        described = client.get("/v1/topics/t09999")
        assert described.status_code == 200, described.text
        assert described.json()["partitions"] == [
            {"partition": 0, "log_start_offset": 0, "log_end_offset": 0, "size_bytes": 0}]

        s3_proxy.delay = ONE_WAY_S
        with s3_proxy.counter.measure() as counted:
            created = client.post("/v1/topics", json={"name": "one-more", "partitions": 3})
        s3_proxy.delay = 0.0
        assert created.status_code == 201, created.text
        assert [p["log_end_offset"] for p in created.json()["partitions"]] == [0, 0, 0]
        made = _catalog_or("one-more", counted)
        kinds = sorted(r.kind for r in made)
        # The catalog row's file and its commit; the table's version 0, its log folder's listing (a former
        # table's leftovers?) and its first checkpoint. No read.
        assert kinds == ["list", "put_data", "put_log", "put_log", "put_log"], counted.describe()
        assert Counted(made).round_trips(ONE_WAY_S) <= 3, counted.describe()

        with s3_proxy.counter.measure() as listing:
            assert len(client.get("/v1/topics").json()["topics"]) == TOPICS + 1
        assert _catalog_or("one-more", listing) == [], listing.describe()  # at most the GET of a newer version

        produced = client.post("/v1/topics/one-more/records", json={"records": [{"value": "v", "partition": 2}]})
        assert produced.status_code == 200, produced.text
        produced = client.post("/v1/topics/t00000/records", json={"records": [{"value": "w"}]})
        assert produced.status_code == 200, produced.text
        server.settle()  # their table commits (behind the journal's answer) are not in the windows below

        # Alter: the row's file, the commit; the answer's describe asks the open log for a newer version: a GET
        # of the next one, or a LIST when the snapshot is older than SNAPSHOT_MAX_AGE_S (a slow moment since the
        # describe above: a loaded machine's fresh-clone run saw it).
        s3_proxy.delay = ONE_WAY_S
        with s3_proxy.counter.measure() as counted:
            altered = client.patch("/v1/topics/t09999/config", json={"config": {"retention.ms": 60000}})
        s3_proxy.delay = 0.0
        assert altered.status_code == 200, altered.text
        made = _catalog_or("t09999", counted)
        kinds = sorted(r.kind for r in made)
        assert kinds in (["get", "put_data", "put_log"], ["list", "put_data", "put_log"]), counted.describe()
        assert Counted(made).round_trips(ONE_WAY_S) <= 3, counted.describe()

        # Delete: the node journal's claims of the topic (its epochs: a LIST, a DeleteObjects), then the table's
        # listing beside the row's file, the commit, one DeleteObjects.
        s3_proxy.delay = ONE_WAY_S
        with s3_proxy.counter.measure() as counted:
            deleted = client.delete("/v1/topics/t00000")
        s3_proxy.delay = 0.0
        assert deleted.status_code == 200, deleted.text
        epochs = quote("/_journal/epochs/t00000/", safe="")
        made = _catalog_or("t00000", counted) + [r for r in counted.requests if r.kind == "delete"
                                                 or (r.kind == "list" and epochs in r.target)]
        assert sorted(r.kind for r in made) == ["delete", "delete", "list", "list", "put_data", "put_log"], \
            counted.describe()
        assert Counted(made).round_trips(ONE_WAY_S) <= 5, counted.describe()

    # Another node loads the catalog: all of it, from the one commit and the creates after it.
    with Broker(Settings(root=root, storage=s3_proxy.options)) as other:
        topics = {t.name: t.partitions for t in other.list_topics()}
        assert len(topics) == TOPICS and topics["one-more"] == 3 and "t00000" not in topics
        assert other.fetch("one-more", 2, 0).records.column("value").to_pylist() == [b"v"]
        other.produce("t09999", [Record(b"x")])
