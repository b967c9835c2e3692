"""A topic deleted and created again under the same name while a producer and a consumer group use it, as
librdkafka's test 0107 (topic_recreate) does it: the SAME producer instance produces before, during and after
(every record flushed in the end), the group commits (auto-commit, and by hand) before, during and after, and
the new topic starts again at offset 0 with none of the old one's records or committed offsets (Kafka deletes
a deleted topic's offsets). While the topic does not exist clients see UNKNOWN_TOPIC_OR_PARTITION
(retriable), never UNKNOWN_SERVER_ERROR ("Unknown broker error"), and the server logs no unexpected error."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.http import conftest as http_fixtures
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback

TOPIC, GROUP = "recreated", "recreated-readers"
# What a record in flight around the delete must not end with. 0107 ignores delivery errors from the delete on
# (a record queued for a partition the new topic lacks is failed by librdkafka itself, once the new topic id
# shows the new partition count), but none may stay stuck until its timeout (0107's flush of 155 records), and
# none may be refused as an error of the broker's own ("Unknown broker error").
NEVER = {KafkaError.UNKNOWN, KafkaError._MSG_TIMED_OUT}


class Traffic:
    """A producer and a group member at work on the topic, each on a thread of its own, as 0107's are: the
    producer sends a record tagged with the current phase every 20 ms; the consumer polls and auto-commits."""

    def __init__(self, bootstrap: str) -> None:
        self.phase = b"before"
        self.delivered: list[tuple[bytes, int, int]] = []  # (value, partition, offset)
        self.failed: list[tuple[bytes, KafkaError]] = []
        self.consumed: list[tuple[bytes, int, int]] = []
        self.consumer_errors: list[KafkaError] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        config = {"bootstrap.servers": bootstrap, "topic.metadata.refresh.interval.ms": 500}
        self.producer = Producer({**config, "message.timeout.ms": int(STUCK_S * 1000), "on_delivery": self._report})
        self.consumer = Consumer({**config, "group.id": GROUP, "auto.offset.reset": "earliest",
                                  "enable.auto.commit": True, "auto.commit.interval.ms": 200})
        self.consumer.subscribe([TOPIC])
        self.polling = threading.Lock()  # the consumer is used by one thread at a time
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]
        self.sent = 0

    def _report(self, err: KafkaError | None, msg: Any) -> None:
        with self.lock:
            if err is None:
                self.delivered.append((msg.value(), msg.partition(), msg.offset()))
            else:
                self.failed.append((msg.value(), err))

    def _produce(self) -> None:
        while not self.stop.is_set():
            self.producer.produce(TOPIC, b"%s-%d" % (self.phase, self.sent))
            self.sent += 1
            self.producer.poll(0.02)

    def _consume(self) -> None:
        while not self.stop.is_set():
            with self.polling:
                messages = self.consumer.consume(100, 0.2)
            with self.lock:
                for message in messages:
                    if message.error() is None:
                        self.consumed.append((message.value(), message.partition(), message.offset()))
                    else:
                        self.consumer_errors.append(message.error())

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def wait_for(self, what: str, seen: Callable[[], bool]) -> None:
        deadline = time.monotonic() + STUCK_S
        while not seen():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)

    def consumed_of(self, phase: bytes) -> list[tuple[bytes, int, int]]:
        with self.lock:
            return [c for c in self.consumed if c[0].startswith(phase)]

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(STUCK_S)
        assert self.producer.flush(STUCK_S) == 0, "records left unflushed"  # 0107's flush

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            if thread.ident is not None:
                thread.join(STUCK_S)
        self.consumer.close()


def group_offsets(server: Any) -> dict[tuple[str, int], int]:
    response = httpx.get(f"{server.url}/v1/groups/{GROUP}/offsets", timeout=STUCK_S)
    if response.status_code == 404:
        return {}
    return {(o["topic"], o["partition"]): o["offset"] for o in response.json()["offsets"]}


@pytest.mark.parametrize("before,after,auto_create", [
    (10, 3, False), (3, 6, False),  # 0107's partition counts: the test creates it again itself, as 0107 does
    (3, 1, True),  # Kafka's default: the producer's next Metadata creates it again (num.partitions 1)
])
def test_delete_and_create_again_under_load(start_server, caplog, before: int, after: int, auto_create: bool) -> None:
    caplog.set_level(logging.WARNING, logger="lakelog")
    server = start_server(auto_create_topics_enable=auto_create)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=before)])[TOPIC].result(timeout=STUCK_S)
    traffic = Traffic(server.bootstrap)
    try:
        traffic.start()
        traffic.wait_for("30 records before the delete", lambda: len(traffic.consumed_of(b"before")) >= 30)
        traffic.wait_for("the group's first commit", lambda: sum(group_offsets(server).values()) > 0)

        traffic.phase = b"during"
        admin.delete_topics([TOPIC])[TOPIC].result(timeout=STUCK_S)
        with traffic.polling, pytest.raises(KafkaException) as refused:  # a partition of the deleted topic only
            traffic.consumer.commit(offsets=[TopicPartition(TOPIC, before - 1, 1)], asynchronous=False)
        assert refused.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, refused.value
        if not auto_create:  # (else the group may have committed to the topic created again already)
            assert group_offsets(server) == {}  # Kafka deletes a deleted topic's committed offsets
        if not auto_create:
            time.sleep(2)  # the producer and the consumer meet the missing topic
            admin.create_topics([NewTopic(TOPIC, num_partitions=after)])[TOPIC].result(timeout=STUCK_S)
        traffic.phase = b"after"
        traffic.wait_for("30 records after the new create", lambda: len(traffic.consumed_of(b"after")) >= 30)
        traffic.finish()
        with traffic.polling:  # by hand too, as a consumer does at the end (auto-commit may have done it all)
            try:
                traffic.consumer.commit(asynchronous=False)
            except KafkaException as exc:
                assert exc.args[0].code() == KafkaError._NO_OFFSET, exc
    finally:
        traffic.close()

    unexpected = [r.getMessage() for r in caplog.records if r.name.startswith("lakelog") and r.levelno >= logging.ERROR]
    assert not unexpected, unexpected[:3]
    assert not [e for e in traffic.consumer_errors if e.code() == KafkaError.UNKNOWN], traffic.consumer_errors
    assert not [(v, e) for v, e in traffic.failed if e.code() in NEVER], traffic.failed

    server.settle()  # every acknowledged record in the table (committed behind the journal)
    table = assert_topic_intact(server.root, TOPIC)  # no duplicate or missing (partition, offset)
    stored = topic_records(server, after)
    assert {p: sorted(o for p2, o in stored if p2 == p) for p in table} == table
    assert all(offsets[0] == 0 for offsets in table.values())  # the new topic starts again at 0
    delivered = {(p, o): v for v, p, o in traffic.delivered}
    assert {k: v for k, v in delivered.items() if k in stored and v == stored[k]} == stored  # each acknowledged
    assert all(stored.get((p, o)) == v for v, p, o in traffic.delivered if v.startswith(b"after"))
    # Read by the group from 0 (no old committed offset or fetch position used), none of the old topic's:
    read = {(p, o) for v, p, o in traffic.consumed if stored.get((p, o)) == v}
    assert any(v.startswith(b"after") for v, _, _ in traffic.consumed)
    for partition in {p for p, _ in read}:
        offsets = sorted(o for p, o in read if p == partition)
        assert offsets == list(range(offsets[-1] + 1)), (partition, offsets[:10])
    committed = group_offsets(server)
    assert {t for t, _ in committed} == {TOPIC}
    for (_, partition), offset in committed.items():  # the new topic's positions
        assert partition < after and offset <= len(table.get(partition, []))


def topic_records(server: Any, partitions: int) -> dict[tuple[int, int], bytes]:
    """Every record of the topic as it is now, read over HTTP from offset 0: (partition, offset) -> value."""
    found: dict[tuple[int, int], bytes] = {}
    with httpx.Client(base_url=server.url, timeout=STUCK_S) as http:
        for partition in range(partitions):
            offset = 0
            while True:
                answer = http.get(f"/v1/topics/{TOPIC}/partitions/{partition}/records",
                                  params={"offset": offset, "max_records": 1000}).json()
                found.update({(partition, r["offset"]): r["value"].encode() for r in answer["records"]})
                if answer["next_offset"] >= answer["high_watermark"]:
                    break
                offset = answer["next_offset"]
    return found
