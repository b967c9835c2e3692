"""The partitioners of clients that share no code with lakelog (kcat's murmur2_random, KafkaJS's
DefaultPartitioner), which the README's table names as agreeing with lakelog's: every key lands on the
partition lakelog's own HTTP produce puts it on.
"""

from __future__ import annotations

import pytest

from tests.http import conftest as http_fixtures
from tests.kafka import independent_clients
from tests.kafka.independent_clients import (
    Served,
    all_records,
    create_topic,
    kafkajs,
    kcat_base,
    lakelog_partitions,
    run,
)
from tests.log_check import assert_topic_intact

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback
kcat = independent_clients.kcat  # the test takes kcat or node by request.getfixturevalue
node = independent_clients.node
served = independent_clients.served


@pytest.mark.parametrize("client", ["kcat murmur2_random", "kafkajs DefaultPartitioner"])
def test_keys_land_where_lakelog_puts_them(client: str, served: Served, request: pytest.FixtureRequest) -> None:
    """The partitioners the README's table names as agreeing with lakelog's, over 300 keys."""
    topic, partitions = f"placed-{client.split()[0]}", 6
    create_topic(served.http, topic, partitions)
    keys = [f"customer-{i}" for i in range(300)]
    if client.startswith("kcat"):
        done = run(kcat_base(request.getfixturevalue("kcat"), served) + [
            "-P", "-t", topic, "-K", "\t", "-X", "partitioner=murmur2_random"],
            stdin="".join(f"{k}\t{k}\n" for k in keys).encode())
        assert done.returncode == 0, done.stderr.decode()
    else:
        kafkajs(request.getfixturevalue("node"), "produce.js", served, topic=topic, partitioner="default",
                batches=[[{"key": k, "value": k} for k in keys]])
    where = lakelog_partitions(served.http, keys, partitions)
    placed = {r["key"]: r["partition"] for r in all_records(served.http, topic)}
    assert len(placed) == 300
    agree = sum(placed[k] == where[k] for k in keys)
    assert agree == 300, f"{client}: {agree}/300 keys on lakelog's partition"
    assert_topic_intact(served.root, topic)
