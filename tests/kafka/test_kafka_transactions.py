"""Kafka transactions against a running lakelog (uvicorn and the Kafka listener in this process, a local
root): confluent-kafka's transactional producer across two topics with `send_offsets_to_transaction`, one
transaction aborted and one committed; a read_committed consumer sees exactly the committed records, Delta
readers (delta-rs and DuckDB) see no aborted record, the group's offsets come with the commit. Then zombie
fencing and the timeout abort. Each test ends with the offset scan, which allows a gap only where an
aborted transaction's placeholder declares it (tests/log_check.py).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from deltalake import DeltaTable

from tests.delta_readers import assert_duckdb_agrees
from tests.http.conftest import start_server  # noqa: F401  (the fixture)
from tests.log_check import aborted_ranges, assert_topic_intact
from tests.patience import STUCK_S


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1) for name in names]).values():
        future.result(STUCK_S)


def transactional(bootstrap: str, transactional_id: str, **config: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **config})
    producer.init_transactions(STUCK_S)
    return producer


def read_committed(bootstrap: str, topics: list[str], group: str, count: int) -> list[tuple[str, int, bytes]]:
    """(topic, offset, value) of what a read_committed consumer reads: `count` records, then nothing more
    for a second (so one too many is seen)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe(topics)
    got: list[tuple[str, int, bytes]] = []
    deadline = time.monotonic() + STUCK_S
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                if len(got) >= count:
                    quiet_until = quiet_until or time.monotonic() + 1.0
                    if time.monotonic() >= quiet_until:
                        break
                continue
            assert message.error() is None, message.error()
            got.append((message.topic(), message.offset(), message.value()))
    finally:
        consumer.close()
    return sorted(got)


def position_after_reading(bootstrap: str, topic: str) -> int:
    """Where a read_committed consumer of partition 0 stands once it has read everything there is: with only
    aborted offsets at the end of the log, their abort marker is what moves it past them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tail", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + STUCK_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            assert message is None or message.error() is None, message.error()
            assert message is None, f"read {message.value()!r}"  # nothing committed to read
            position = consumer.position([TopicPartition(topic, 0)])[0].offset
            if position >= 1:
                return position
        return consumer.position([TopicPartition(topic, 0)])[0].offset
    finally:
        consumer.close()


def watermarks(bootstrap: str, topic: str, isolation: str) -> tuple[int, int]:
    """ListOffsets earliest and latest, as a consumer of that isolation level asks them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "w", "isolation.level": isolation})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), STUCK_S)
    finally:
        consumer.close()


def table_values(root: str, topic: str) -> list[bytes]:
    """The topic's values as an independent Delta reader sees them."""
    table = DeltaTable(f"{root}/topics/{topic}").to_pyarrow_table(columns=["offset", "value"]).sort_by("offset")
    return table.column("value").to_pylist()


def test_abort_one_commit_another_across_two_topics_with_the_group_offsets(start_server) -> None:  # noqa: F811
    server = start_server()
    create_topics(server.bootstrap, "in", "out-a", "out-b")
    plain = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(5):
        plain.produce("in", value=b"in-%d" % i, partition=0)
    assert plain.flush(STUCK_S) == 0

    source = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "etl", "auto.offset.reset": "earliest",
                       "enable.auto.commit": False, "isolation.level": "read_committed"})
    source.subscribe(["in"])
    inputs = []
    deadline = time.monotonic() + STUCK_S
    while len(inputs) < 5 and time.monotonic() < deadline:
        message = source.poll(0.2)
        if message is not None and message.error() is None:
            inputs.append(message.value())
    assert len(inputs) == 5

    producer = transactional(server.bootstrap, "etl-1")
    producer.begin_transaction()
    for value in inputs:
        producer.produce("out-a", value=b"aborted-" + value, partition=0)
        producer.produce("out-b", value=b"aborted-" + value, partition=0)
    producer.flush(STUCK_S)
    producer.abort_transaction(STUCK_S)

    producer.begin_transaction()
    for value in inputs:
        producer.produce("out-a", value=b"a-" + value, partition=0)
        producer.produce("out-b", value=b"b-" + value, partition=0)
    positions = source.position(source.assignment())
    producer.send_offsets_to_transaction(positions, source.consumer_group_metadata(), STUCK_S)
    producer.commit_transaction(STUCK_S)
    source.close()

    got = read_committed(server.bootstrap, ["out-a", "out-b"], "checker", 10)
    assert [v for _, _, v in got] == sorted([b"a-" + v for v in inputs] + [b"b-" + v for v in inputs])
    # As in Kafka: the aborted offsets 0-4 are not reused, and each transaction's marker takes an offset (5, 11)
    assert [o for t, o, _ in got if t == "out-a"] == list(range(6, 11))
    assert watermarks(server.bootstrap, "out-a", "read_committed") == (0, 12)

    committed = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "etl"}).committed(
        [TopicPartition("in", 0)], STUCK_S)
    assert committed[0].offset == 5  # the group's offset came with the transaction

    for topic, prefix in (("out-a", b"a-"), ("out-b", b"b-")):
        assert table_values(server.root, topic) == [prefix + v for v in inputs]  # no aborted record
        assert aborted_ranges(server.root, topic) == {0: {*range(6), 11}}  # the aborted records and both markers
        assert_topic_intact(server.root, topic)
        rows = assert_duckdb_agrees(server.root, topic)
        assert not any(value.startswith(b"aborted-") for _, _, _, value in rows)


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(start_server) -> None:  # noqa: F811
    server = start_server()
    create_topics(server.bootstrap, "fenced")
    zombie = transactional(server.bootstrap, "app")
    zombie.begin_transaction()
    zombie.produce("fenced", value=b"zombie", partition=0)
    zombie.flush(STUCK_S)

    assert watermarks(server.bootstrap, "fenced", "read_committed") == (0, 0)  # the last stable offset
    assert watermarks(server.bootstrap, "fenced", "read_uncommitted") == (0, 1)  # the high watermark

    successor = transactional(server.bootstrap, "app")  # aborts the zombie's open transaction
    successor.begin_transaction()
    successor.produce("fenced", value=b"successor", partition=0)
    successor.commit_transaction(STUCK_S)

    with pytest.raises(KafkaException) as refused:
        zombie.commit_transaction(STUCK_S)
    assert refused.value.args[0].fatal() or "fenced" in str(refused.value).lower()

    assert [v for _, _, v in read_committed(server.bootstrap, ["fenced"], "g", 1)] == [b"successor"]
    assert table_values(server.root, "fenced") == [b"successor"]
    assert aborted_ranges(server.root, "fenced") == {0: {0, 1, 3}}  # the zombie's record, and the two markers
    assert_topic_intact(server.root, "fenced")
    assert_duckdb_agrees(server.root, "fenced")


def test_a_transaction_gone_quiet_is_aborted_at_its_timeout(start_server) -> None:  # noqa: F811
    server = start_server()
    create_topics(server.bootstrap, "quiet")
    producer = transactional(server.bootstrap, "slow", **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce("quiet", value=b"never", partition=0)
    producer.flush(STUCK_S)
    deadline = time.monotonic() + STUCK_S
    while not aborted_ranges(server.root, "quiet") and time.monotonic() < deadline:
        time.sleep(0.2)  # the coordinator's reaper aborts it (and bumps the epoch)
    assert aborted_ranges(server.root, "quiet") == {0: {0, 1}}  # the aborted record and its marker
    assert position_after_reading(server.bootstrap, "quiet") == 2  # past the aborted offset and the marker: the log end
    with pytest.raises(KafkaException):
        producer.commit_transaction(STUCK_S)  # fenced: its epoch was bumped by the abort

    later = transactional(server.bootstrap, "slow")
    later.begin_transaction()
    later.produce("quiet", value=b"after", partition=0)
    later.commit_transaction(STUCK_S)
    assert [v for _, _, v in read_committed(server.bootstrap, ["quiet"], "g", 1)] == [b"after"]
    assert table_values(server.root, "quiet") == [b"after"]
    assert_topic_intact(server.root, "quiet")
    assert_duckdb_agrees(server.root, "quiet")


def test_kafka_python_and_aiokafka_transactional_producers(start_server) -> None:  # noqa: F811
    """The other two Python clients' transactional producers: each aborts one transaction and commits
    another; a read_committed consumer reads exactly the committed records."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    server = start_server()
    create_topics(server.bootstrap, "kp", "aio")

    producer = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="kp-1")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("kp", b"kp-aborted", partition=0)
    producer.flush(STUCK_S)
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send("kp", b"kp-committed", partition=0)
    producer.commit_transaction()
    producer.close()

    async def aio() -> None:
        client = AIOKafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="aio-1")
        await client.start()
        try:
            async with client.transaction():
                await client.send_and_wait("aio", b"aio-committed", partition=0)
            await client.begin_transaction()
            await client.send_and_wait("aio", b"aio-aborted", partition=0)
            await client.abort_transaction()
        finally:
            await client.stop()

    asyncio.run(aio())
    got = read_committed(server.bootstrap, ["kp", "aio"], "both", 2)
    assert got == [("aio", 0, b"aio-committed"), ("kp", 2, b"kp-committed")]  # kp: the abort marker at 1
    for topic in ("kp", "aio"):
        assert_topic_intact(server.root, topic)
        assert not any(b"aborted" in (v or b"") for v in table_values(server.root, topic))


def test_a_transactional_batch_to_a_typed_topic_is_refused_plainly(start_server) -> None:  # noqa: F811
    """Typed topics check and type records on the writer's path, which transactional batches do not take:
    refused with INVALID_REQUEST (and logged), nothing written."""
    server = start_server()
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("typed", 1, 1, config={"confluent.value.schema.validation": "true"})]
                        )["typed"].result(STUCK_S)
    producer = transactional(server.bootstrap, "typed-1")
    producer.begin_transaction()
    producer.produce("typed", value=b"x", partition=0)
    with pytest.raises(KafkaException, match="INVALID_REQUEST|invalid request|Invalid request"):
        producer.commit_transaction(STUCK_S)
    assert table_values(server.root, "typed") == []
    assert_topic_intact(server.root, "typed")


def test_describe_and_list_transactions(start_server) -> None:  # noqa: F811
    from kafka.protocol.admin.transactions import DescribeTransactionsRequest, ListTransactionsRequest

    from tests.kafka import raw_calls

    server = start_server()
    create_topics(server.bootstrap, "d1", "d2")
    producer = transactional(server.bootstrap, "described")
    producer.begin_transaction()
    producer.produce("d1", value=b"1", partition=0)
    producer.produce("d2", value=b"2", partition=0)
    producer.flush(STUCK_S)

    described = raw_calls.call(server.bootstrap, DescribeTransactionsRequest(
        transactional_ids=["described", "unknown"]), 0).transaction_states
    assert [(s.transactional_id, s.error_code, s.transaction_state) for s in described] == [
        ("described", 0, "Ongoing"), ("unknown", 105, "")]  # 105: TRANSACTIONAL_ID_NOT_FOUND
    assert sorted((t.topic, list(t.partitions)) for t in described[0].topics) == [("d1", [0]), ("d2", [0])]
    assert described[0].transaction_timeout_ms == 60_000 and described[0].transaction_start_time_ms > 0

    ongoing = raw_calls.call(server.bootstrap, ListTransactionsRequest(
        state_filters=["Ongoing", "Bogus"], producer_id_filters=[]), 0)
    assert [t.transactional_id for t in ongoing.transaction_states] == ["described"]
    assert ongoing.unknown_state_filters == ["Bogus"]
    producer.commit_transaction(STUCK_S)
    done = raw_calls.call(server.bootstrap, ListTransactionsRequest(
        state_filters=[], producer_id_filters=[described[0].producer_id], duration_filter=-1), 1)
    assert [(t.transactional_id, t.transaction_state) for t in done.transaction_states] == [
        ("described", "CompleteCommit")]
