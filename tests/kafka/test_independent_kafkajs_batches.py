"""What KafkaJS (npm, pinned in tests/kafka/js/package-lock.json; it shares no code with lakelog or with its
Python dependencies) is told about the record batches it writes and reads, through tests/kafka/js/produce.js
and read.js: a send's answer names the partition's log start offset (Produce v5+, what ListOffsets earliest
answers), and a fetched batch carries the producer id, epoch and sequences its records were written with.
"""

from __future__ import annotations

from typing import Any

from tests.http import conftest as http_fixtures
from tests.kafka import independent_clients
from tests.kafka.independent_clients import Served, create_topic, kafkajs, produce_http, topic_detail

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback
node = independent_clients.node
served = independent_clients.served


def send(node: str, served: Served, topic: str, batches: list[list[dict[str, Any]]],
         idempotent: bool = True) -> list[list[dict[str, Any]]]:
    return kafkajs(node, "produce.js", served, topic=topic, batches=batches, idempotent=idempotent)["sent"]


def records(n: int, prefix: str) -> list[dict[str, Any]]:
    return [{"key": f"{prefix}{i}", "value": f"{prefix}-{i}", "partition": 0} for i in range(n)]


def test_kafkajs_send_is_told_the_log_start_offset(node: str, served: Served) -> None:
    topic = "kafkajs-log-start"
    create_topic(served.http, topic, 1)
    (first,) = send(node, served, topic, [records(5, "a")])
    assert first == [{"partition": 0, "baseOffset": 0, "logStartOffset": 0}]

    # DeleteRecords below offset 3 (KafkaJS's admin; it needs the topic's metadata loaded first)
    loaded, deleted = kafkajs(node, "admin.js", served, calls=[
        {"call": "fetchTopicMetadata", "args": {"topics": [topic]}},
        {"call": "deleteTopicRecords", "args": {"topic": topic, "partitions": [{"partition": 0, "offset": "3"}]}}],
    )["results"]
    assert loaded["ok"] and deleted["ok"], (loaded, deleted)
    assert topic_detail(served.http, topic)["partitions"][0]["log_start_offset"] == 3

    (second,) = send(node, served, topic, [records(2, "b")], idempotent=False)
    assert second == [{"partition": 0, "baseOffset": 5, "logStartOffset": 3}]


def test_kafkajs_reads_back_the_producer_fields_it_wrote(node: str, served: Served) -> None:
    """Each producer's records come back in batches of its own: an idempotent producer's with its producer id,
    epoch 0 and the sequences it sent (first sequence + offset delta); the records of a producer without an
    id (KafkaJS's non-idempotent producer, lakelog's HTTP produce) with id -1 and epoch 0, as KafkaJS writes
    them (lakelog keeps no epoch for them)."""
    topic = "kafkajs-producer-fields"
    create_topic(served.http, topic, 1)
    send(node, served, topic, [records(3, "a"), records(2, "a")])  # offsets 0-4: one producer, two sends
    send(node, served, topic, [records(2, "plain")], idempotent=False)  # 5-6
    produce_http(served.http, topic, [{"key": "http", "value": "x", "partition": 0}])  # 7
    send(node, served, topic, [records(2, "b")])  # 8-9: another producer, another id

    read = kafkajs(node, "read.js", served, topic=topic, groupId="fields-reader", count=10)["records"]
    assert [r["offset"] for r in read] == list(range(10))
    batch = {r["offset"]: r["batch"] for r in read}
    first_id, second_id = int(batch[0]["producerId"]), int(batch[8]["producerId"])
    assert first_id >= 0 and second_id >= 0 and first_id != second_id
    for offset in range(10):
        fields = batch[offset]
        producer, sequence = {**dict.fromkeys(range(5), (first_id, offset)),
                              **dict.fromkeys((8, 9), (second_id, offset - 8))}.get(offset, (-1, None))
        assert (int(fields["producerId"]), fields["producerEpoch"]) == (producer, 0), (offset, fields)
        assert not fields["inTransaction"]
        if sequence is not None:  # a record's sequence is its batch's first one plus its offset delta
            assert fields["firstSequence"] + offset - fields["firstOffset"] == sequence, (offset, fields)
