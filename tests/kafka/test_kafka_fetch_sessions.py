"""Fetch sessions (KIP-227) on the Kafka listener: kafka-python's consumer (its FetchSessionHandler) over
many partitions while records arrive, raw Fetch calls for the session errors and an incremental answer,
and the object-store requests of idle incremental polls over many partitions."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse

from lakelog.kafka_api.fetch_sessions import FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH
from lakelog.platform.layout import topic_path
from tests.http.conftest import ThreadServer, start_server  # noqa: F401  (the fixture)
from tests.kafka.raw_calls import call
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

VERSION = 12  # the highest Fetch the listener serves: sessions (v7+), topics by name (v13+ names them by id)
Topic, Forgotten = FetchRequest.FetchTopic, FetchRequest.ForgottenTopic
Partition = FetchRequest.FetchTopic.FetchPartition


def fetch(server: ThreadServer, session_id: int, epoch: int, partitions: dict[tuple[str, int], int],
          forgotten: dict[str, list[int]] | None = None, wait_ms: int = 0) -> Any:
    """One Fetch v12 on a new connection (sessions belong to the listener, not to a connection)."""
    topics: dict[str, list[Any]] = {}
    for (topic, partition), offset in partitions.items():
        topics.setdefault(topic, []).append(Partition(partition=partition, fetch_offset=offset,
                                                      partition_max_bytes=1 << 20))
    request = FetchRequest(replica_id=-1, max_wait_ms=wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           session_id=session_id, session_epoch=epoch,
                           topics=[Topic(topic=t, partitions=ps) for t, ps in topics.items()],
                           forgotten_topics_data=[Forgotten(topic=t, partitions=ps)
                                                  for t, ps in (forgotten or {}).items()], rack_id="")
    return call(server.bootstrap, request, VERSION, STUCK_S)


def listed(response: Any) -> dict[tuple[str, int], Any]:
    return {(t.topic, p.partition_index): p for t in response.responses for p in t.partitions}


def produce(server: ThreadServer, topic: str, values: list[tuple[int, bytes]]) -> None:
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all")
    try:
        for future in [producer.send(topic, value=v, partition=p) for p, v in values]:
            future.get(STUCK_S)
    finally:
        producer.close()


def create(server: ThreadServer, topic: str, partitions: int) -> None:
    with server.client() as http:
        response = http.post("/v1/topics", json={"name": topic, "partitions": partitions, "config": {}})
        assert response.status_code == 201, response.text


def test_kafka_python_reads_many_partitions_through_one_incremental_session_while_records_arrive(
        start_server) -> None:  # noqa: F811
    """Rounds of records, each to two thirds of 24 partitions (the rest idle), produced while the consumer
    polls; the next round starts once the consumer has the last one, so its session sees many changes."""
    server = start_server()
    partitions, rounds = 24, 8
    create(server, "sessions", partitions)
    consumer = KafkaConsumer("sessions", bootstrap_servers=server.bootstrap, group_id="session-readers",
                             auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=100)
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    sent: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + STUCK_S
    try:
        for r in range(rounds):
            batch = [(p, b"%d-%d-%d" % (p, r, i)) for i in range(5) for p in range(partitions) if (p + r) % 3]
            for p, value in batch:
                sent[p].append(value)
            producing = threading.Thread(target=produce, args=(server, "sessions", batch))
            producing.start()
            while sum(map(len, got.values())) < sum(map(len, sent.values())) and time.monotonic() < deadline:
                for tp, records in consumer.poll(200).items():
                    got[tp.partition].extend((r.offset, r.value) for r in records)
            producing.join(STUCK_S)
        handlers = list(consumer._fetcher._session_handlers.values())  # kafka-python's KIP-227 state, per node
    finally:
        consumer.close()
    for p in range(partitions):  # every record once, in order
        assert got[p] == list(enumerate(sent[p])), p
    # The consumer's fetches went on in one session: the broker answered a session id, and the incremental
    # answers that followed (each moving the epoch on) were accepted.
    assert [h.next_metadata.session_id != 0 and h.next_metadata.epoch > rounds for h in handlers] == [True], [
        (h.next_metadata.session_id, h.next_metadata.epoch) for h in handlers]
    assert_topic_intact(server.root, "sessions")


def test_raw_fetches_open_continue_forget_and_close_a_session(start_server) -> None:  # noqa: F811
    server = start_server()
    create(server, "raw-sessions", 3)
    produce(server, "raw-sessions", [(0, b"a"), (1, b"b"), (2, b"c")])
    everything = {("raw-sessions", p): 1 for p in range(3)}  # each at its log end
    opened = fetch(server, 0, 0, everything)
    session = opened.session_id
    assert session != 0 and opened.error_code == 0
    assert {k: (p.error_code, p.high_watermark) for k, p in listed(opened).items()} == {k: (0, 1) for k in everything}

    idle = fetch(server, session, 1, {})  # nothing changed: an incremental answer lists no partition
    assert (idle.error_code, idle.session_id, listed(idle)) == (0, session, {})

    produce(server, "raw-sessions", [(1, b"b2")])
    news = fetch(server, session, 2, {})
    (key, data), = listed(news).items()
    assert key == ("raw-sessions", 1) and data.high_watermark == 2 and len(bytes(data.records)) > 0
    moved_on = fetch(server, session, 3, {("raw-sessions", 1): 2})  # the consumer's new position
    assert (moved_on.session_id, listed(moved_on)) == (session, {})

    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.delete_records({TopicPartition("raw-sessions", 0): 1})  # partition 0's log start moves, no record
    finally:
        admin.close()
    trimmed = fetch(server, session, 4, {})
    (key, data), = listed(trimmed).items()
    assert key == ("raw-sessions", 0) and (data.log_start_offset, data.high_watermark, bytes(data.records)) == (
        1, 1, b"")
    assert listed(fetch(server, session, 5, {})) == {}  # told once

    forgot = fetch(server, session, 6, {}, forgotten={"raw-sessions": [2]})
    assert listed(forgot) == {}
    produce(server, "raw-sessions", [(2, b"c2")])
    assert listed(fetch(server, session, 7, {})) == {}  # partition 2 left the session

    wrong = fetch(server, session, 11, {})
    assert (wrong.error_code, wrong.session_id, listed(wrong)) == (INVALID_FETCH_SESSION_EPOCH, 0, {})
    unknown = fetch(server, session + 1 if session < 2**31 - 1 else 1, 1, {})
    assert (unknown.error_code, listed(unknown)) == (FETCH_SESSION_ID_NOT_FOUND, {})
    assert fetch(server, session, 8, {}).error_code == 0  # the errors left the session as it was

    closed = fetch(server, session, -1, {("raw-sessions", 2): 1})  # -1: closed, answered without a session
    assert (closed.error_code, closed.session_id) == (0, 0)
    assert [(k, bytes(p.records) != b"") for k, p in listed(closed).items()] == [(("raw-sessions", 2), True)]
    assert fetch(server, session, 9, {}).error_code == FETCH_SESSION_ID_NOT_FOUND

    sessionless = fetch(server, 0, -1, everything)
    assert (sessionless.session_id, sorted(listed(sessionless))) == (0, sorted(everything))
    assert_topic_intact(server.root, "raw-sessions")


@pytest.mark.s3
def test_idle_incremental_polls_over_many_partitions_read_no_table_per_partition(start_server,  # noqa: F811
                                                                                  s3_proxy) -> None:
    """50 partitions at their log end, long-polled 30 times (200 ms each) in one session: the object store
    sees at most a look at the topic's log per refresh interval (a GET of its next version), however many
    partitions and polls; one read per partition per poll would be 1500 requests, one per poll 30."""
    refresh_s = 1.0
    server = start_server(root=s3_proxy.root(), storage=s3_proxy.options, refresh_interval_ms=int(refresh_s * 1000))
    partitions, polls = 50, 30
    create(server, "idle", partitions)
    produce(server, "idle", [(p, b"only") for p in range(partitions)])
    server.settle()
    everything = {("idle", p): 1 for p in range(partitions)}
    opened = fetch(server, 0, 0, everything)
    assert opened.session_id != 0 and len(listed(opened)) == partitions
    started = time.monotonic()
    with s3_proxy.counter.measure() as counted:
        answers = [fetch(server, opened.session_id, epoch, {}, wait_ms=200) for epoch in range(1, polls + 1)]
    elapsed = time.monotonic() - started
    assert [(a.error_code, a.session_id, listed(a)) for a in answers] == [(0, opened.session_id, {})] * polls
    touched = [r for r in counted.requests if topic_path("idle") in r.target]
    assert elapsed >= polls * 0.2  # each poll waited its max_wait_ms: nothing answered early
    assert len(touched) <= elapsed / refresh_s + 2, (len(touched), elapsed, counted.describe())
    assert all(r.kind in ("get", "head", "list") for r in touched), counted.describe()
    assert_topic_intact(server.root, "idle", server.settings.storage)


def test_a_fetch_before_v7_has_no_session(start_server) -> None:  # noqa: F811
    server = start_server()
    create(server, "old-fetch", 1)
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           topics=[Topic(topic="old-fetch", partitions=[Partition(partition=0, fetch_offset=0,
                                                                                   partition_max_bytes=1 << 20)])])
    answer = call(server.bootstrap, request, 6, STUCK_S)
    assert isinstance(answer, FetchResponse)
    assert [(p.partition_index, p.error_code, p.high_watermark) for t in answer.responses
            for p in t.partitions] == [(0, 0, 0)]
