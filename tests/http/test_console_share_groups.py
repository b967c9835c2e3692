"""The web console's share group pages in a real headless browser (as `test_console.py`): the list, and a
group's members, share-partition and in-flight records with their states and delivery counts."""

from __future__ import annotations

from typing import Callable

import httpx

from tests.http.conftest import ThreadServer
from tests.http.test_console import browser, pytestmark, rows, text_of, wait_for  # noqa: F401  (fixture, skip)
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S


def test_console_shows_a_share_groups_in_flight_records(start_server: Callable[..., ThreadServer],
                                                        browser: object) -> None:  # noqa: F811
    server = start_server()
    with httpx.Client(base_url=server.url, timeout=STUCK_S) as c:
        assert c.post("/v1/topics", json={"name": "jobs"}).status_code == 201
        assert c.put("/v1/share-groups/workers/config",
                     json={"config": {"share.auto.offset.reset": "earliest"}}).status_code == 200
        assert c.post("/v1/topics/jobs/records", json={"records": [{"value": f"j{i}"} for i in range(3)]}
                      ).status_code == 200
        member = c.post("/v1/share-groups/workers/members", json={"topics": ["jobs"], "client_id": "w1"}
                        ).json()["member_id"]
        first = c.post(f"/v1/share-groups/workers/members/{member}/poll", json={"timeout_ms": 5000})
        assert len(first.json()["records"]) == 3
        acks = [{"topic": "jobs", "partition": 0, "offset": 0, "type": "accept"},
                {"topic": "jobs", "partition": 0, "offset": 1, "type": "release"}]
        again = c.post(f"/v1/share-groups/workers/members/{member}/poll", json={"timeout_ms": 5000, "acks": acks})
        assert [(r["offset"], r["delivery_count"]) for r in again.json()["records"]] == [(1, 2)]
    driver = browser
    driver.get(server.url + "/ui/#/share-groups")  # type: ignore[attr-defined]
    wait_for(driver, lambda: rows(driver, "share-groups") == [["workers", "Stable", "1", "jobs", "2"]],
             "the share group list")
    driver.get(server.url + "/ui/#/share-groups/workers")  # type: ignore[attr-defined]
    in_flight = wait_for(driver, lambda: len(rows(driver, "in-flight")) == 2 and rows(driver, "in-flight"),
                         "the in-flight records")
    assert [r[:6] for r in in_flight] == [["jobs", "0", "1", "acquired", "2", member],  # type: ignore[index]
                                          ["jobs", "0", "2", "acquired", "1", member]]
    assert rows(driver, "share-partitions") == [["jobs", "0", "1", "3", "2", "0", "0"]]
    assert [r[:2] for r in rows(driver, "share-members")] == [[member, "w1"]]
    assert ["share.auto.offset.reset", "earliest", "group"] in rows(driver, "share-config")
    assert text_of(driver, "status") == ""
    assert_topic_intact(server.root, "jobs")
