"""The web console at /ui in a real headless browser (Debian's chromium and chromedriver) against a real server
with authentication on: topics with their offsets, a topic's partitions and records, a group's members and lag,
plots that start with the server's history, the jobs' last runs and the nodes, what a principal without rights
cannot see, the API key entered in the page; a typed topic's records by field."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

from lakelog.platform.ops.job_runs import JobRun, record_runs
from lakelog.platform.storage import Storage
from tests.http.conftest import ThreadServer
from tests.patience import STUCK_S

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
KEYS = {"admin-secret": "admin", "alice-secret": "alice"}
ADMIN = {"Authorization": "Bearer admin-secret"}

pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                reason="chromium and chromedriver are not installed (apt-get install chromium "
                                       "chromium-driver)")


@pytest.fixture
def browser() -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # type: ignore[assignment]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))  # type: ignore[arg-type]
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def wait_for(driver: object, check: Callable[[], object], what: str, timeout: float = 15) -> object:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as exc:  # the element is being replaced by a refresh, or not there yet
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}; "
                         f"status: {driver.find_element('id', 'status').text!r}")  # type: ignore[attr-defined]


def text_of(driver: object, element_id: str) -> str:
    return driver.find_element("id", element_id).text  # type: ignore[attr-defined]


def rows(driver: object, element_id: str) -> list[list[str]]:
    table = driver.find_element("id", element_id)  # type: ignore[attr-defined]
    return [[cell.text for cell in row.find_elements("tag name", "td")]
            for row in table.find_elements("css selector", "tbody tr")]


def enter_key(driver: object, key: str) -> None:
    field = driver.find_element("id", "api-key")  # type: ignore[attr-defined]
    field.clear()
    field.send_keys(key)
    driver.find_element("id", "use-key").click()  # type: ignore[attr-defined]


def plotted(driver: object, chart_id: str) -> tuple[int, int, int]:
    """(points, lines drawn, the oldest point's time in ms) of a chart as the page drew it."""
    figure = driver.find_element("id", chart_id)  # type: ignore[attr-defined]
    lines = figure.find_elements("css selector", "svg polyline")
    return int(figure.get_attribute("data-points") or 0), len(lines), int(figure.get_attribute("data-from") or 0)


def sampled(server: ThreadServer, path: str, samples: int) -> None:
    """Wait until the server's history at `path` holds this many samples."""
    deadline = time.monotonic() + STUCK_S
    while len(httpx.get(server.url + path, headers=ADMIN, timeout=STUCK_S).json()["times_ms"]) < samples:
        assert time.monotonic() < deadline, f"{path}: fewer than {samples} samples"
        time.sleep(0.1)


def seed(server: ThreadServer) -> None:
    with httpx.Client(base_url=server.url, headers=ADMIN, timeout=30) as c:
        for name, partitions in (("orders", 2), ("payroll", 1)):
            assert c.post("/v1/topics", json={"name": name, "partitions": partitions}).status_code == 201
        records = [{"key": f"user-{i}", "value": f"order {i} <b>not html</b>", "partition": i % 2,
                    "headers": [{"key": "source", "value": "web"}]} for i in range(5)]
        assert c.post("/v1/topics/orders/records", json={"records": records}).status_code == 200
        assert c.post("/v1/topics/payroll/records", json={"records": [{"value": "salary"}]}).status_code == 200
        acls = [{"principal": "alice", "resource_type": "topic", "resource_name": "orders", "operation": "read"}]
        assert c.post("/v1/acls", json={"acls": acls}).status_code == 201
        joined = c.post("/v1/groups/billing/members", json={"topics": ["orders"], "session.timeout.ms": 60000,
                                                             "auto.offset.reset": "earliest"})
        assert joined.status_code == 201, joined.text
        member = joined.json()["member_id"]
        beat = c.post(f"/v1/groups/billing/members/{member}/heartbeat").json()
        assert beat["state"] == "Stable", beat
        commit = c.post("/v1/groups/billing/offsets", json={
            "member_id": member, "generation": beat["generation"],
            "offsets": [{"topic": "orders", "partition": 0, "offset": 1}, {"topic": "orders", "partition": 1,
                                                                            "offset": 2}]})
        assert commit.status_code == 200, commit.text
    record_runs(Storage.open(server.root), [  # as the scheduler does after a round
        JobRun("retention", "orders", 1_700_000_000_000, 1.5, True, commits=1, files_removed=3, bytes_removed=4096),
        JobRun("compact", "", 1_700_000_002_000, 0.5, False)])


def test_console_shows_topics_records_and_groups_with_the_api_key(
        start_server: Callable[..., ThreadServer], browser: object, tmp_path: Path) -> None:
    server = start_server(api_keys_json=json.dumps(KEYS), history_interval_s=0.2)  # plots with a past, fast
    seed(server)
    assert httpx.get(server.url + "/ui", follow_redirects=True, timeout=STUCK_S).status_code == 200
    assert httpx.get(server.url + "/ui/console.js", timeout=STUCK_S).headers["content-type"].startswith(
        ("application/javascript", "text/javascript"))
    driver = browser

    # no key: the page loads and says it needs one
    driver.get(server.url + "/ui/")  # type: ignore[attr-defined]
    wait_for(driver, lambda: "needs an API key" in text_of(driver, "status"), "the 401 message")

    # the admin key: every topic, with partitions and log end offsets
    enter_key(driver, "admin-secret")
    topics = wait_for(driver, lambda: len(rows(driver, "topics")) == 2 and rows(driver, "topics"), "the topics")
    assert topics == [["orders", "2", "0, 0", "3, 2", "5", topics[0][5]],  # type: ignore[index]
                      ["payroll", "1", "0", "1", "1", topics[1][5]]]  # type: ignore[index]
    assert text_of(driver, "status") == ""

    # one topic: partitions, the latest records of a partition (text, never HTML), config
    sampled(server, "/v1/topics/orders/history", 3)
    opened_ms = time.time() * 1000
    driver.find_element("link text", "orders").click()  # type: ignore[attr-defined]
    partitions = wait_for(driver, lambda: rows(driver, "partitions")[0][0] == "0" and rows(driver, "partitions"),
                          "the partitions of orders")
    # the plots drawn on opening the page already hold the server's samples from before it opened, one line
    # per partition (a page sampling for itself would have one point each, after opened_ms)
    for chart_id in ("rate-chart", "size-chart"):
        points, lines, oldest = wait_for(driver, lambda: plotted(driver, chart_id)[0] and plotted(driver, chart_id),
                                         f"the {chart_id}")  # type: ignore[misc]
        assert lines == 2 and points >= 4 and oldest < opened_ms, (chart_id, points, lines, oldest, opened_ms)
    assert [row[:4] for row in partitions] == [["0", "0", "3", "3"], ["1", "0", "2", "2"]]  # type: ignore[index]
    records = wait_for(driver, lambda: len(rows(driver, "records")) == 3 and rows(driver, "records"),
                       "the records of orders-0")
    assert [(r[0], r[2], r[3], r[4]) for r in records] == [  # type: ignore[union-attr]
        (str(i), f"user-{2 * i}", f"order {2 * i} <b>not html</b>", "source=web") for i in range(3)]
    assert "retention.ms" in text_of(driver, "config")
    driver.find_element("css selector", "#browse-partition option[value='1']").click()  # type: ignore[attr-defined]
    driver.find_element("id", "browse-go").click()  # type: ignore[attr-defined]
    wait_for(driver, lambda: [r[3] for r in rows(driver, "records")] == ["order 1 <b>not html</b>",
                                                                          "order 3 <b>not html</b>"],
             "the records of orders-1")
    driver.find_element("id", "produce-key").send_keys("user-9")  # type: ignore[attr-defined]
    driver.find_element("id", "produce-value").send_keys("from the console")  # type: ignore[attr-defined]
    driver.find_element("css selector", "#produce button").click()  # type: ignore[attr-defined]
    wait_for(driver, lambda: "written to partition" in text_of(driver, "produce-result"), "the produce answer")
    with httpx.Client(base_url=server.url, headers=ADMIN) as c:
        ends = [p["log_end_offset"] for p in c.get("/v1/topics/orders").json()["partitions"]]
    assert sum(ends) == 6
    driver.save_screenshot(os.environ.get("LAKELOG_CONSOLE_SCREENSHOT") or str(tmp_path / "console.png"))  # type: ignore[attr-defined]

    # consumer groups: state, members, committed offsets and lag
    driver.find_element("id", "nav-groups").click()  # type: ignore[attr-defined]
    groups = wait_for(driver, lambda: rows(driver, "groups")[0][0] == "billing" and rows(driver, "groups"),
                      "the groups")
    assert groups == [["billing", "classic", "Stable", "1", "orders", str(ends[0] - 1 + ends[1] - 2)]]
    opened_ms = time.time() * 1000
    driver.find_element("link text", "billing").click()  # type: ignore[attr-defined]
    offsets = wait_for(driver, lambda: rows(driver, "offsets")[0][0] == "orders" and rows(driver, "offsets"),
                       "the group's offsets")
    points, lines, oldest = wait_for(driver, lambda: plotted(driver, "lag-chart")[0] and plotted(driver, "lag-chart"),
                                     "the lag chart")  # type: ignore[misc]
    assert lines == 2 and points >= 4 and oldest < opened_ms, (points, lines, oldest, opened_ms)
    members = rows(driver, "members")
    assert len(members) == 1 and members[0][0].startswith("member-") and members[0][3] == "orders-0, orders-1"
    assert [row[:4] for row in offsets] == [  # type: ignore[index]
        ["orders", "0", "1", str(ends[0] - 1)], ["orders", "1", "2", str(ends[1] - 2)]]
    assert members[0][0] in offsets[0][4]  # type: ignore[index]
    assert "Stable" in text_of(driver, "group-state")

    # alice sees only what she may describe; a page she may not read says so
    enter_key(driver, "alice-secret")
    driver.get(server.url + "/ui/#/topics")  # type: ignore[attr-defined]
    wait_for(driver, lambda: [r[0] for r in rows(driver, "topics")] == ["orders"], "alice's topics")
    driver.get(server.url + "/ui/#/topics/payroll")  # type: ignore[attr-defined]
    wait_for(driver, lambda: "Not allowed" in text_of(driver, "status"), "the 403 message")

    # jobs: the last runs (newest first) and the nodes; alice may not describe the cluster: nodes only
    driver.get(server.url + "/ui/#/jobs")  # type: ignore[attr-defined]
    wait_for(driver, lambda: "Not allowed" in text_of(driver, "jobs-note"), "alice's refused job runs")
    node = httpx.get(server.url + "/v1/cluster", headers=ADMIN, timeout=STUCK_S).json()["node"]
    assert [r[0] for r in rows(driver, "nodes")] == [node]
    enter_key(driver, "admin-secret")
    runs = wait_for(driver, lambda: len(rows(driver, "job-runs")) == 2 and rows(driver, "job-runs"), "the job runs")
    assert [(r[0], r[2], r[3], r[4], r[5], r[6], r[8]) for r in runs] == [  # type: ignore[union-attr]
        ("compact", "0.5 s", "failed", "-", "0", "0", "0 B"), ("retention", "1.5 s", "ok", "orders", "1", "3", "4.0 KiB")]
    nodes = rows(driver, "nodes")
    assert len(nodes) == 1 and nodes[0][1] == server.url and nodes[0][3] == "live (this node)"
    assert "orders" in nodes[0][4]
    assert rows(driver, "sites") == [["no replica sites configured (one root)"]]


SHIPMENT = {"type": "record", "name": "Shipment", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"},
    {"name": "to", "type": {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "note", "type": ["null", "string"], "default": None}]}


def column_names(driver: object, element_id: str) -> list[str]:
    table = driver.find_element("id", element_id)  # type: ignore[attr-defined]
    return [cell.text for cell in table.find_elements("css selector", "thead th")]


def test_console_shows_a_typed_topics_records_by_field(
        start_server: Callable[..., ThreadServer], browser: object) -> None:
    server = start_server()
    with httpx.Client(base_url=server.url, timeout=STUCK_S) as c:
        # a record from before the topic was typed (its value does not decode), then records of the schema
        assert c.post("/v1/topics", json={"name": "shipments"}).status_code == 201
        assert c.post("/v1/topics/shipments/records", json={"records": [
            {"key": "old", "value": "a plain value"}]}).status_code == 200
        registered = c.post("/subjects/shipments-value/versions", json={"schema": json.dumps(SHIPMENT)})
        assert registered.status_code == 200, registered.text
        typed = c.patch("/v1/topics/shipments/config", json={"config": {"confluent.value.schema.validation": True}})
        assert typed.status_code == 200, typed.text
        written = c.post("/v1/topics/shipments/records", json={"value_format": "json", "records": [
            {"key": "k1", "value": {"id": 1, "item": "pen <b>", "to": {"city": "Lyon"}, "tags": ["a", "b"],
                                    "note": None}},
            {"key": "k2", "value": {"id": 2, "item": "ink", "to": {"city": "Oslo"}, "tags": [], "note": "blue"}}]})
        assert written.status_code == 200, written.text
    driver = browser
    driver.get(server.url + "/ui/#/topics/shipments")  # type: ignore[attr-defined]
    records = wait_for(driver, lambda: len(rows(driver, "records")) == 3 and rows(driver, "records"),
                       "the records of shipments")
    table = driver.find_element("id", "records")  # type: ignore[attr-defined]
    assert table.get_attribute("data-view") == "fields"
    assert column_names(driver, "records") == [
        "OFFSET", "TIMESTAMP", "KEY", "id", "item", "to", "tags", "note", "VALUE (NOT DECODED)", "HEADERS"]
    assert [[r[0], *r[2:]] for r in records] == [  # type: ignore[union-attr]
        ["0", "old", "", "", "", "", "", "a plain value", ""],
        ["1", "k1", "1", "pen <b>", '{"city":"Lyon"}', '["a","b"]', "null", "", ""],
        ["2", "k2", "2", "ink", '{"city":"Oslo"}', "[]", "blue", "", ""]]
    assert text_of(driver, "status") == ""

    # an untyped topic keeps the key and value view
    with httpx.Client(base_url=server.url, timeout=STUCK_S) as c:
        assert c.post("/v1/topics", json={"name": "plain"}).status_code == 201
        assert c.post("/v1/topics/plain/records", json={"records": [{"value": "v"}]}).status_code == 200
    driver.get(server.url + "/ui/#/topics/plain")  # type: ignore[attr-defined]
    wait_for(driver, lambda: [r[3] for r in rows(driver, "records")] == ["v"], "the records of plain")
    assert column_names(driver, "records") == ["OFFSET", "TIMESTAMP", "KEY", "VALUE", "HEADERS"]
    assert driver.find_element("id", "records").get_attribute("data-view") is None  # type: ignore[attr-defined]
