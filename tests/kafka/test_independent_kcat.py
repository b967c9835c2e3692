"""kcat (librdkafka, Debian's package; it shares no code with lakelog or with its Python dependencies) on
lakelog's Kafka listener, driven by its command line as a user would and checked over lakelog's HTTP API,
never by its exit code alone: produce with each compression codec (which the `WireTap` sees on the wire)
to the partitions lakelog's own HTTP produce picks for the same keys; Metadata; reading what HTTP wrote in
each compression.type; a consumer group of two members (the second joins, the partitions are split, both
commit; one leaves, the other takes everything over).
"""

from __future__ import annotations

import json

import pytest

from tests.http import conftest as http_fixtures
from tests.kafka import independent_clients
from tests.kafka.independent_clients import (
    Member,
    Served,
    all_records,
    check_group_run,
    create_topic,
    kcat_base,
    lakelog_partitions,
    produce_http,
    records_of,
    run,
    wait_committed_to_end,
    wait_for,
    wait_owned,
)
from tests.log_check import assert_topic_intact

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback
kcat = independent_clients.kcat
served = independent_clients.served
members = independent_clients.members


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produces_with_each_codec(kcat: str, served: Served, codec: str) -> None:
    topic, partitions = f"kcat-{codec}", 3
    create_topic(served.http, topic, partitions)
    keys = [f"user-{i}" for i in range(20)]
    lines = [f"{k}\t{k}-{n}" for n in range(3) for k in keys]
    compression = [] if codec == "none" else ["-z", codec]
    done = run(kcat_base(kcat, served) + ["-P", "-t", topic, "-K", "\t", "-H", "source=kcat", *compression,
                                         "-X", "partitioner=murmur2_random", "-X", "enable.idempotence=true"],
               stdin="\n".join(lines).encode() + b"\n")
    assert done.returncode == 0, done.stderr.decode()

    batches = served.tap.produced()
    # librdkafka 2.0 (Debian's kcat) sends gzip, snappy and lz4 only to a broker that serves Produce v0 (its
    # check asks for a Produce version in [0, 0]; zstd's for one in [0, 7]): otherwise it logs "Broker does
    # not support compression type" at debug level and sends the batch uncompressed.
    assert batches and {c for c, _ in batches} == {codec}, f"batches on the wire (codec, records): {batches}"
    assert sum(n for _, n in batches) == len(lines)
    where = lakelog_partitions(served.http, keys, partitions)
    stored = all_records(served.http, topic)
    assert len(stored) == len(lines)
    for record in stored:
        key = record["key"]
        assert record["partition"] == where[key], f"{key} on {record['partition']}, lakelog puts it on {where[key]}"
        assert record["headers"] == [{"key": "source", "value": "kcat"}]
    for key in keys:  # each key's records in the order sent
        assert [r["value"] for r in stored if r["key"] == key] == [f"{key}-{n}" for n in range(3)]
    assert_topic_intact(served.root, topic)


def test_kcat_metadata_names_the_topics(kcat: str, served: Served) -> None:
    create_topic(served.http, "listed-a", 2)
    create_topic(served.http, "listed-b", 5)
    done = run(kcat_base(kcat, served) + ["-L", "-J"])
    assert done.returncode == 0, done.stderr.decode()
    metadata = json.loads(done.stdout)
    assert [b["name"] for b in metadata["brokers"]] == [served.bootstrap]  # the advertised address
    # Kafka's internal topics (__consumer_offsets, as Kafka lists it) are in Metadata, not in the HTTP API's list
    seen = {t["topic"]: sorted(p["partition"] for p in t["partitions"]) for t in metadata["topics"]
            if not t["topic"].startswith("__")}
    over_http = {t["name"]: t["partitions"] for t in served.http.get("/v1/topics").json()["topics"]}
    assert {name: len(ps) for name, ps in seen.items()} == over_http == {"listed-a": 2, "listed-b": 5}
    assert seen["listed-b"] == list(range(5))


@pytest.mark.parametrize("compression_type", ["producer", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_reads_what_http_wrote(kcat: str, served: Served, compression_type: str) -> None:
    """kcat -C reads each partition to its end; the topic's compression.type is how lakelog compresses
    the fetched batches."""
    topic = f"fetched-{compression_type}"
    create_topic(served.http, topic, 2, **{"compression.type": compression_type})
    produce_http(served.http, topic, [{"key": f"k{i}", "value": f"v{i}" * 50, "partition": i % 2,
                                       "headers": [{"key": "n", "value": str(i)}]} for i in range(40)])
    done = run(kcat_base(kcat, served) + ["-C", "-t", topic, "-o", "beginning", "-e", "-J"])
    assert done.returncode == 0, done.stderr.decode()
    got = sorted((m["partition"], m["offset"], m["key"], m["payload"], m["headers"])
                 for m in map(json.loads, done.stdout.decode().splitlines()))
    stored = sorted((r["partition"], r["offset"], r["key"], r["value"], [h["key"], h["value"]])
                    for r in all_records(served.http, topic) for h in r["headers"])
    assert got == stored and len(got) == 40
    assert_topic_intact(served.root, topic)


def test_kcat_group_two_members_rebalance_and_commits(kcat: str, served: Served, members: list[Member]) -> None:
    topic, group, partitions = "kcat-grouped", "kcat-readers", 4
    http = served.http
    create_topic(http, topic, partitions)
    phase_1 = set(produce_http(http, topic, [{"key": f"a{i}", "value": "x"} for i in range(40)]))

    def member(client_id: str) -> Member:
        started = Member(kcat_base(kcat, served) + [
            "-G", group, "-X", f"client.id={client_id}", "-X", "auto.offset.reset=earliest",
            "-X", "auto.commit.interval.ms=100", "-X", "heartbeat.interval.ms=300",
            "-X", "session.timeout.ms=10000", "-J", "-u", topic], client_id, stop_by_stdin=False)
        members.append(started)
        return started

    a = member("kcat-a")
    owners_1 = wait_owned(http, group, topic, {"kcat-a": 4}, partitions)
    wait_committed_to_end(http, group, topic)

    b = member("kcat-b")  # joins: a rebalance splits the partitions
    owners_2 = wait_owned(http, group, topic, {"kcat-a": 2, "kcat-b": 2}, partitions)
    phase_2 = set(produce_http(http, topic, [{"key": f"b{i}", "value": "y"} for i in range(40)]))
    wait_committed_to_end(http, group, topic)

    a.stop()  # leaves: b takes everything over
    owners_3 = wait_owned(http, group, topic, {"kcat-b": 4}, partitions)
    phase_3 = set(produce_http(http, topic, [{"key": f"c{i}", "value": "z"} for i in range(12)]))
    wait_committed_to_end(http, group, topic)
    b.stop()

    consumed = {"kcat-a": records_of(a.events()), "kcat-b": records_of(b.events())}
    check_group_run(http, group, topic, consumed,
                    [(owners_1, phase_1), (owners_2, phase_2), (owners_3, phase_3)])
    assert wait_for("the group empty", lambda: http.get(f"/v1/groups/{group}").json()["state"] == "Empty")
    assert_topic_intact(served.root, topic)
