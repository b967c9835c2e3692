"""`lakelog topics repair`, run as the installed command would be (a subprocess) beside two running nodes on
one root: records another Delta writer (delta-rs, another process) appended beyond a partition's log end are
removed in one commit, and both nodes serve the partition again, over HTTP and to a Kafka consumer, without a
restart; lakelog's own records stay as they were. A change the repair cannot undo is refused, nothing removed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
from confluent_kafka import Consumer, TopicPartition
from deltalake import DeltaTable

from lakelog.kafka_api.errors import CODES
from tests.http.conftest import ThreadServer, create_topic, fetch_all, start_server  # noqa: F401  (the fixture)
from tests.http.test_outside_change_errors import kafka_fetch_error
from tests.log_check import assert_topic_intact
from tests.outside_writer import run_delta_rs
from tests.patience import STUCK_S

LAKELOG = [sys.executable, "-m", "lakelog.cli"]
APPEND_BEYOND_END = """
end = dt.transaction_version("lakelog.partition.0")
write_deltalake(dt, rows(0, range(end, end + 3)), mode="append")"""


def repair(root: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LAKELOG, "topics", "repair", "orders", *args], capture_output=True, text=True,
                          env={**os.environ, "LAKELOG_ROOT": root}, timeout=STUCK_S)


def produce(client: httpx.Client, partition: int, values: list[str]) -> httpx.Response:
    return client.post("/v1/topics/orders/records",
                       json={"records": [{"value": v, "partition": partition} for v in values]})


def served_again(client: httpx.Client) -> list[dict]:
    """Partition 0's records once the node serves it again (it loads the repair's commit within a second)."""
    deadline = time.monotonic() + STUCK_S
    while True:
        fetched = client.get("/v1/topics/orders/partitions/0/records", params={"offset": 0})
        if fetched.status_code == 200 or time.monotonic() > deadline:
            assert fetched.status_code == 200, fetched.text
            return fetched.json()["records"]
        assert fetched.json()["error_code"] == "DATA_CHANGED_OUTSIDE_LAKELOG"
        time.sleep(0.1)


def consumed(bootstrap: str, partition: int) -> list[tuple[int, bytes]]:
    """The partition's records from offset 0 to its end, as confluent-kafka's consumer reads them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "repair-check", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition("orders", partition, 0)])
    found: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + STUCK_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == -191, message.error()  # _PARTITION_EOF: the end
                return found
            found.append((message.offset(), message.value()))
    finally:
        consumer.close()
    raise AssertionError(f"partition {partition} not read to its end: {found}")


def test_repair_removes_an_outside_append_and_every_node_serves_again_without_a_restart(start_server) -> None:  # noqa: F811
    first: ThreadServer = start_server()
    with first.client() as client:
        create_topic(client, "orders", partitions=2)
        for partition in (0, 1):
            assert produce(client, partition, [f"v{i}" for i in range(5)]).status_code == 200
        first.settle()  # the table committed behind the acknowledgement: the outside writer appends past its end
        run_delta_rs(f"{first.root}/topics/orders", None, APPEND_BEYOND_END)
        # The change is found at the node's next table commit of the partition, not at the produce: one made
        # before it may be acknowledged, at the log end lakelog knows (it waits in the journal for the repair).
        waiting = produce(client, 0, ["x"])
        assert waiting.status_code in (200, 409), waiting.text
        if waiting.status_code == 200:
            assert waiting.json()["offsets"][0]["offset"] == 5
        else:
            assert waiting.json()["error_code"] == "DATA_CHANGED_OUTSIDE_LAKELOG"
        kept = [b"x"] if waiting.status_code == 200 else []  # lakelog's own records: none lost, none twice
        first.settle()  # the node's table commit meets the change: the partition is refused from then on
        refused = produce(client, 0, ["y"])
        assert refused.status_code == 409 and refused.json()["error_code"] == "DATA_CHANGED_OUTSIDE_LAKELOG"
        assert "run `lakelog topics repair orders`" in refused.json()["message"]
    second: ThreadServer = start_server()  # another node on the root: it finds the append at its first fetch
    for server in (first, second):
        with server.client() as client:
            fetched = client.get("/v1/topics/orders/partitions/0/records", params={"offset": 0})
            assert fetched.status_code == 409 and fetched.json()["error_code"] == "DATA_CHANGED_OUTSIDE_LAKELOG"
        assert kafka_fetch_error(server.bootstrap, "orders", 0) == CODES["KAFKA_STORAGE_ERROR"]

    repaired = repair(first.root, "--output", "table")
    assert repaired.returncode == 0, repaired.stderr
    header, row = repaired.stdout.splitlines()[0:3:2]
    assert header.split() == ["TOPIC", "PARTITION", "LOG-END-OFFSET", "REMOVED-RECORDS", "REMOVED-OFFSETS", "FILES"]
    assert row.split()[:5] == ["orders", "0", "5", "3", "5-7"]
    assert "removed 3 records appended outside lakelog from 1 partition(s) of topic 'orders'" in repaired.stdout
    assert "repaired partition 0 of topic orders: removed 3 records at offsets 5..7" in repaired.stderr  # logged
    again = repair(first.root, "--output", "table")
    assert again.returncode == 0 and "nothing to repair" in again.stdout, again.stderr

    ours = [f"v{i}" for i in range(5)]
    for server in (first, second):  # neither restarted
        with server.client() as client:
            served = [r["value"] for r in served_again(client)]
            # the acknowledged "x" follows once its table commit (behind the repair) is in
            assert served in (ours, ours + [v.decode() for v in kept]), served
        assert kafka_fetch_error(server.bootstrap, "orders", 0) == 0
    with second.client() as client:
        produced = produce(client, 0, ["after the repair"])
        assert produced.status_code == 200, produced.text
        assert produced.json()["offsets"][0]["offset"] == 5 + len(kept)
    with first.client() as client:
        assert produce(client, 0, ["and on the first node"]).status_code == 200
        assert [r["value"] for r in fetch_all(client, "orders", 1)] == [f"v{i}" for i in range(5)]
    expected = [f"v{i}".encode() for i in range(5)] + kept + [b"after the repair", b"and on the first node"]
    assert consumed(first.bootstrap, 0) == list(enumerate(expected))
    first.settle()  # the tables are committed behind the acknowledgements: read them directly once they hold them
    second.settle()
    offsets = assert_topic_intact(first.root, "orders")
    assert offsets == {0: list(range(len(expected))), 1: list(range(5))}
    history = DeltaTable(f"{first.root}/topics/orders").history()
    assert sum(1 for commit in history if commit.get("lakelog.job") == "repair") == 1  # one commit


def test_repair_refuses_what_it_cannot_undo_and_removes_nothing(start_server) -> None:  # noqa: F811
    server: ThreadServer = start_server()
    with server.client() as client:
        create_topic(client, "orders", partitions=1)
        assert produce(client, 0, [f"v{i}" for i in range(5)]).status_code == 200
    server.settle()  # the table committed behind the acknowledgement: the outside writer writes across its end
    run_delta_rs(f"{server.root}/topics/orders", None, """
end = dt.transaction_version("lakelog.partition.0")
assert end == 5, end
write_deltalake(dt, rows(0, range(end - 2, end + 1)), mode="append")""")  # offsets on both sides of the end
    version = DeltaTable(f"{server.root}/topics/orders").version()
    refused = repair(server.root)
    assert refused.returncode == 1
    error = refused.stderr.splitlines()[-1]  # the lines before it: the log's (the refusal, why)
    assert error.startswith("error: DATA_CHANGED_OUTSIDE_LAKELOG: topic 'orders' cannot be repaired, nothing was "
                            "removed: partition 0: "), refused.stderr
    assert "on both sides of the log end offset 5" in error
    assert DeltaTable(f"{server.root}/topics/orders").version() == version
