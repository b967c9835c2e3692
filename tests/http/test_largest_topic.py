"""The largest topic a node may create (catalog.MAX_PARTITIONS partitions), over HTTP, on its own: the fuzz
test brings its partition counts down so that its cases stay small; `make bench` times this create."""

from __future__ import annotations

from typing import Callable

from lakelog.platform.catalog.catalog import MAX_PARTITIONS
from tests.patience import STUCK_S
from tests.http.conftest import ThreadServer


def test_a_topic_of_the_most_partitions_is_created_and_served(start_server: Callable[..., ThreadServer]) -> None:
    server = start_server()
    with server.client(timeout=STUCK_S) as client:
        created = client.post("/v1/topics", json={"name": "largest", "partitions": MAX_PARTITIONS})
        assert created.status_code == 201, created.text
        too_many = client.post("/v1/topics", json={"name": "larger", "partitions": MAX_PARTITIONS + 1})
        assert too_many.status_code == 422, too_many.text
        described = client.get("/v1/topics/largest").json()
        assert len(described["partitions"]) == MAX_PARTITIONS
        last = MAX_PARTITIONS - 1
        produced = client.post("/v1/topics/largest/records", json={"records": [{"value": "v", "partition": last}]})
        assert produced.status_code == 200, produced.text
        fetched = client.get(f"/v1/topics/largest/partitions/{last}/records", params={"offset": 0}).json()
        assert [r["value"] for r in fetched["records"]] == ["v"]
    assert not any(t["name"] == "larger" for t in server.client().get("/v1/topics").json()["topics"])
