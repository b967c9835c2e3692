"""What unmodified Kafka clients see when lakelog's Kafka listener refuses them: each of kafka-python,
confluent-kafka and aiokafka gets its own error type (or code) for the Kafka error lakelog answers.

- An unknown topic: UNKNOWN_TOPIC_OR_PARTITION within a short client timeout, and nothing is created
  (lakelog has no auto-creation).
- A group's committed offset outside the log (past its end, or below its start after retention):
  auto.offset.reset earliest restarts at the log start, latest at the end, none/error surfaces
  OFFSET_OUT_OF_RANGE.
- ACLs, with SASL/PLAIN on API keys: TOPIC_AUTHORIZATION_FAILED on produce and on consume,
  GROUP_AUTHORIZATION_FAILED on joining a group, and the same client succeeds once an ACL is granted
  over HTTP. A wrong password is an authentication failure.

Each client's way of reporting an error is in its adapter below (`ERRORS` and `check`), so the tests
read the same for all three.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Iterator, TypeVar

import aiokafka.errors
import httpx
import kafka.errors
import pytest
from confluent_kafka import KafkaError, KafkaException

from lakelog.spark_jobs.jobs import run_job
from tests.http.conftest import ThreadServer, make_settings, start_server  # noqa: F401  (the fixture)
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

API_KEYS = '{"k-admin": "admin", "k-bob": "bob"}'
ADMIN = {"authorization": "Bearer k-admin"}
BOB = ("bob", "k-bob")  # SASL/PLAIN: the principal, its API key
Sasl = tuple[str, str] | None
Records = list[tuple[int, bytes | None]]  # (offset, value)
T = TypeVar("T")


# ---- the clients -----------------------------------------------------------------------------------


class KafkaClient:
    """How a client reports each Kafka error: ERRORS maps Kafka's error name to the client's own."""

    name: str
    ERRORS: dict[str, Any]

    def is_error(self, error: BaseException, name: str) -> bool:
        return type(error) is self.ERRORS[name]  # the client's exception class for that error

    def check(self, error: BaseException, name: str) -> None:
        assert self.is_error(error, name), f"{self.name}: expected {name}, got {error!r}"

    @staticmethod
    def _sasl(sasl: Sasl) -> dict[str, Any]:  # kafka-python's and aiokafka's names
        if sasl is None:
            return {}
        return dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_plain_username=sasl[0],
                    sasl_plain_password=sasl[1])


class KafkaPythonClient(KafkaClient):
    name = "kafka-python"
    ERRORS = {
        "UNKNOWN_TOPIC_OR_PARTITION": kafka.errors.UnknownTopicOrPartitionError,
        "OFFSET_OUT_OF_RANGE": kafka.errors.OffsetOutOfRangeError,
        "TOPIC_AUTHORIZATION_FAILED": kafka.errors.TopicAuthorizationFailedError,
        "GROUP_AUTHORIZATION_FAILED": kafka.errors.GroupAuthorizationFailedError,
        "SASL_AUTHENTICATION_FAILED": kafka.errors.SaslAuthenticationFailedError,
    }

    def producer(self, bootstrap: str, sasl: Sasl = None) -> "Producer":
        from kafka import KafkaProducer

        # Not idempotent: kafka-python's idempotent producer turns fatal on a TOPIC_AUTHORIZATION_FAILED
        # produce answer (its classify_batch_error), where the Java client only fails the batch.
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, max_block_ms=2000,
                                 **self._sasl(sasl))
        return Producer(lambda topic, value: producer.send(topic, value).get(10).offset, producer.close)

    def consumer(self, bootstrap: str, topic: str, group: str, reset: str, sasl: Sasl = None) -> "Consumer":
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset=reset,
                                 enable_auto_commit=False, **self._sasl(sasl))

        def poll(timeout_s: float) -> Records:
            return [(r.offset, r.value) for rs in consumer.poll(int(timeout_s * 1000)).values() for r in rs]

        return Consumer(poll, consumer.close)

    def unknown_topic(self, bootstrap: str, topic: str) -> BaseException:
        """kafka-python keeps asking for the topic's metadata (UNKNOWN_TOPIC_OR_PARTITION is retriable) and
        gives up after max_block_ms, as the Java client does; its admin shows the answer's error."""
        from kafka.admin import KafkaAdminClient

        producer = self.producer(bootstrap)
        try:
            with pytest.raises(kafka.errors.KafkaTimeoutError, match="Failed to update metadata after 2.0 secs"):
                producer.send(topic, b"v")
        finally:
            producer.close()
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            [described] = admin.describe_topics([topic])
        finally:
            admin.close()
        return kafka.errors.for_code(described["error_code"])()

    def authentication_errors(self, bootstrap: str, sasl: Sasl, caplog: pytest.LogCaptureFixture) -> list:
        """kafka-python retries the bootstrap until bootstrap_timeout_ms, logging each refusal."""
        from kafka import KafkaProducer

        with pytest.raises(kafka.errors.KafkaTimeoutError, match="Unable to bootstrap"):
            KafkaProducer(bootstrap_servers=bootstrap, bootstrap_timeout_ms=2000, **self._sasl(sasl))
        return _logged_errors(caplog, "kafka")


class ConfluentClient(KafkaClient):
    name = "confluent-kafka"
    ERRORS = {
        "UNKNOWN_TOPIC_OR_PARTITION": KafkaError.UNKNOWN_TOPIC_OR_PART,
        # auto.offset.reset=error: librdkafka's local error, which names the broker's.
        "OFFSET_OUT_OF_RANGE": KafkaError._AUTO_OFFSET_RESET,
        "TOPIC_AUTHORIZATION_FAILED": KafkaError.TOPIC_AUTHORIZATION_FAILED,
        "GROUP_AUTHORIZATION_FAILED": KafkaError.GROUP_AUTHORIZATION_FAILED,
        "SASL_AUTHENTICATION_FAILED": KafkaError._AUTHENTICATION,  # librdkafka's, with the broker's message
    }

    def is_error(self, error: BaseException, name: str) -> bool:
        if not isinstance(error, KafkaException) or error.args[0].code() != self.ERRORS[name]:
            return False
        return name != "OFFSET_OUT_OF_RANGE" or "Broker: Offset out of range" in error.args[0].str()

    @staticmethod
    def _config(bootstrap: str, sasl: Sasl) -> dict[str, Any]:
        config: dict[str, Any] = {"bootstrap.servers": bootstrap,
                                  "topic.metadata.refresh.interval.ms": 500}  # an ACL granted is seen soon
        if sasl is not None:
            config.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                           "sasl.username": sasl[0], "sasl.password": sasl[1]})
        return config

    def producer(self, bootstrap: str, sasl: Sasl = None) -> "Producer":
        from confluent_kafka import Producer as RdProducer

        producer = RdProducer({**self._config(bootstrap, sasl), "acks": "all", "enable.idempotence": False,
                               "message.timeout.ms": 5000,
                               "topic.metadata.propagation.max.ms": 500})  # an unknown topic fails fast

        def send(topic: str, value: bytes) -> int:
            reports: list = []
            producer.produce(topic, value, on_delivery=lambda err, msg: reports.append((err, msg)))
            assert producer.flush(10) == 0
            [(err, msg)] = reports
            if err is not None:
                raise KafkaException(err)
            return msg.offset()

        return Producer(send, lambda: producer.flush(1))

    def consumer(self, bootstrap: str, topic: str, group: str, reset: str, sasl: Sasl = None) -> "Consumer":
        from confluent_kafka import Consumer as RdConsumer

        consumer = RdConsumer({**self._config(bootstrap, sasl), "group.id": group, "enable.auto.commit": False,
                               "auto.offset.reset": "error" if reset == "none" else reset})
        consumer.subscribe([topic])

        def poll(timeout_s: float) -> Records:
            got = []
            for message in consumer.consume(500, timeout_s):
                if message.error():
                    raise KafkaException(message.error())
                got.append((message.offset(), message.value()))
            return got

        return Consumer(poll, consumer.close)

    def unknown_topic(self, bootstrap: str, topic: str) -> BaseException:
        producer = self.producer(bootstrap)
        with pytest.raises(KafkaException) as caught:
            producer.send(topic, b"v")
        return caught.value

    def authentication_errors(self, bootstrap: str, sasl: Sasl, caplog: pytest.LogCaptureFixture) -> list:
        """librdkafka reports a refused SASL handshake to error_cb, and keeps reconnecting."""
        from confluent_kafka import Producer as RdProducer

        reported: list = []
        producer = RdProducer({**self._config(bootstrap, sasl), "error_cb": reported.append,
                               "logger": logging.getLogger("rdkafka")})  # its log into pytest's
        with pytest.raises(KafkaException):
            producer.list_topics(timeout=2)
        producer.poll(0)  # serves the error callbacks
        return [KafkaException(err) for err in reported]


class AioKafkaClient(KafkaClient):
    name = "aiokafka"
    ERRORS = {
        "UNKNOWN_TOPIC_OR_PARTITION": aiokafka.errors.UnknownTopicOrPartitionError,
        "OFFSET_OUT_OF_RANGE": aiokafka.errors.OffsetOutOfRangeError,
        "TOPIC_AUTHORIZATION_FAILED": aiokafka.errors.TopicAuthorizationFailedError,
        "GROUP_AUTHORIZATION_FAILED": aiokafka.errors.GroupAuthorizationFailedError,
        "SASL_AUTHENTICATION_FAILED": aiokafka.errors.SaslAuthenticationFailed,
    }

    def __init__(self) -> None:
        self.runner: asyncio.Runner | None = None

    def run(self, coroutine: Any) -> Any:
        """One event loop for the clients of a test (they live across calls)."""
        if self.runner is None:
            self.runner = asyncio.Runner()
        return self.runner.run(coroutine)

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None

    def producer(self, bootstrap: str, sasl: Sasl = None) -> "Producer":
        from aiokafka import AIOKafkaProducer

        async def start() -> AIOKafkaProducer:
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=2000,
                                        **self._sasl(sasl))
            try:
                await producer.start()
            except BaseException:
                await producer.stop()
                raise
            return producer

        producer = self.run(start())
        return Producer(lambda topic, value: self.run(producer.send_and_wait(topic, value)).offset,
                        lambda: self.run(producer.stop()))

    def consumer(self, bootstrap: str, topic: str, group: str, reset: str, sasl: Sasl = None) -> "Consumer":
        from aiokafka import AIOKafkaConsumer

        started: list[AIOKafkaConsumer] = []

        async def poll(timeout_s: float) -> Records:
            if not started:  # start() joins the group: a refusal is raised here, and a later poll starts anew
                consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                            auto_offset_reset=reset, enable_auto_commit=False, **self._sasl(sasl))
                try:
                    await consumer.start()
                except BaseException:
                    await consumer.stop()
                    raise
                started.append(consumer)
            batches = await started[0].getmany(timeout_ms=int(timeout_s * 1000))
            return [(r.offset, r.value) for rs in batches.values() for r in rs]

        async def stop() -> None:
            for consumer in started:
                await consumer.stop()

        return Consumer(lambda timeout_s: self.run(poll(timeout_s)), lambda: self.run(stop()))

    def unknown_topic(self, bootstrap: str, topic: str) -> BaseException:
        producer = self.producer(bootstrap)  # request_timeout_ms bounds aiokafka's wait for metadata
        try:
            with pytest.raises(aiokafka.errors.KafkaError) as caught:
                producer.send(topic, b"v")
        finally:
            producer.close()
        return caught.value

    def authentication_errors(self, bootstrap: str, sasl: Sasl, caplog: pytest.LogCaptureFixture) -> list:
        """aiokafka's start() fails to bootstrap; the refusal itself is logged."""
        with pytest.raises(aiokafka.errors.KafkaConnectionError, match="Unable to bootstrap"):
            self.producer(bootstrap, sasl)
        return _logged_errors(caplog, "aiokafka")


class Producer:
    def __init__(self, send: Callable[[str, bytes], int], close: Callable[[], Any]) -> None:
        self.send = send  # (topic, value) -> offset; raises the client's error
        self.close = close


class Consumer:
    def __init__(self, poll: Callable[[float], Records], close: Callable[[], Any]) -> None:
        self.poll = poll  # timeout_s -> records; raises the client's error
        self.close = close

    def error(self, timeout_s: float = 10) -> BaseException:
        """The first error a poll raises."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                records = self.poll(0.2)
            except Exception as exc:
                return exc
            assert not records, f"records instead of an error: {records}"
        raise AssertionError(f"no error within {timeout_s} s")

    def records(self, count: int = 1, timeout_s: float = 10, between: Callable[[], Any] = lambda: None) -> Records:
        """At least `count` records (fails on an error); `between` runs before every poll."""
        got: Records = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            between()
            got += self.poll(0.3)
        assert len(got) >= count, f"{len(got)} records within {timeout_s} s, wanted {count}"
        return got


CLIENTS = [KafkaPythonClient(), ConfluentClient(), AioKafkaClient()]


@pytest.fixture(params=CLIENTS, ids=lambda c: c.name)
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    yield request.param
    if isinstance(request.param, AioKafkaClient):
        request.param.close()


def _logged_errors(caplog: pytest.LogCaptureFixture, logger: str) -> list[BaseException]:
    """The exceptions a client's log records carry as arguments."""
    args = [arg for r in caplog.records if r.name.startswith(logger) and isinstance(r.args, tuple) for arg in r.args]
    return [arg for arg in args if isinstance(arg, BaseException)]


def eventually(attempt: Callable[[], T], timeout_s: float = 10) -> T:
    """attempt() until it does not raise: a grant reaches a client with its next metadata."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return attempt()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# ---- HTTP --------------------------------------------------------------------------------------------


def create_topic(server: ThreadServer, name: str, headers: dict | None = None, **config: Any) -> None:
    response = httpx.post(f"{server.url}/v1/topics", json={"name": name, "partitions": 1, "config": config},
                          headers=headers, timeout=STUCK_S)
    assert response.status_code == 201, response.text


def produce(server: ThreadServer, topic: str, *values: str, headers: dict | None = None) -> list[int]:
    response = httpx.post(f"{server.url}/v1/topics/{topic}/records", headers=headers,
                          json={"records": [{"value": v} for v in values]}, timeout=STUCK_S)
    assert response.status_code == 200, response.text
    return [o["offset"] for o in response.json()["offsets"]]


def log_range(server: ThreadServer, topic: str, headers: dict | None = None) -> tuple[int, int]:
    response = httpx.get(f"{server.url}/v1/topics/{topic}", headers=headers, timeout=STUCK_S)
    assert response.status_code == 200, response.text
    [partition] = response.json()["partitions"]
    return partition["log_start_offset"], partition["log_end_offset"]


def commit(server: ThreadServer, group: str, topic: str, offset: int) -> None:
    response = httpx.post(f"{server.url}/v1/groups/{group}/offsets",
                          json={"offsets": [{"topic": topic, "partition": 0, "offset": offset}]}, timeout=STUCK_S)
    assert response.status_code == 200, response.text


def grant(server: ThreadServer, resource_type: str, name: str, operation: str) -> None:
    acl = {"principal": "bob", "resource_type": resource_type, "resource_name": name, "operation": operation}
    response = httpx.post(f"{server.url}/v1/acls", json={"acls": [acl]}, headers=ADMIN, timeout=STUCK_S)
    assert response.status_code == 201, response.text


# ---- unknown topic -----------------------------------------------------------------------------------


def test_produce_to_unknown_topic_fails_and_creates_nothing(start_server, client) -> None:  # noqa: F811
    server = start_server()
    topic = f"missing-{client.name}"
    started = time.monotonic()
    client.check(client.unknown_topic(server.bootstrap, topic), "UNKNOWN_TOPIC_OR_PARTITION")
    assert time.monotonic() - started < 10
    assert httpx.get(f"{server.url}/v1/topics/{topic}", timeout=STUCK_S).status_code == 404  # no auto-creation
    assert httpx.get(f"{server.url}/v1/topics", timeout=STUCK_S).json()["topics"] == []


# ---- committed offsets out of range ----------------------------------------------------------------


@pytest.fixture(scope="module")
def retained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ThreadServer, str]]:
    """One server, one topic whose first records retention removed: its log starts at 4."""
    server = ThreadServer(make_settings(tmp_path_factory.mktemp("retained"))).start()
    topic = "retained"
    create_topic(server, topic, **{"retention.bytes": 0})
    for i in range(3):  # three commits, three files: retention keeps the active (last) one
        produce(server, topic, f"old-{2 * i}", f"old-{2 * i + 1}")
    assert run_job("retention", server.app.state.services.broker, topics=[topic]).commits == 1
    assert log_range(server, topic) == (4, 6)
    yield server, topic
    assert_topic_intact(server.root, topic, allow_gaps=True)
    server.stop()


@pytest.mark.parametrize("committed", ["past-end", "below-start"])
@pytest.mark.parametrize("reset", ["earliest", "latest", "none"])
def test_committed_offset_out_of_range(retained, client, reset: str, committed: str) -> None:
    server, topic = retained
    group = f"{client.name}-{reset}-{committed}"
    start, end = log_range(server, topic)
    commit(server, group, topic, end + 100 if committed == "past-end" else start - 3)
    consumer = client.consumer(server.bootstrap, topic, group, reset)
    try:
        if reset == "earliest":
            got = consumer.records(count=end - start)
            assert [o for o, _ in got] == list(range(start, start + len(got)))  # from the log start
        elif reset == "latest":
            late: list[int] = []

            def produce_one() -> None:  # the reset's end is not known in advance: records keep coming
                late.extend(produce(server, topic, f"late-{len(late)}"))

            got = consumer.records(between=produce_one)
            first = got[0][0]
            assert first >= end and first in late  # from the end: nothing that was there before
            assert [o for o, _ in got] == list(range(first, first + len(got)))
            assert all(value.startswith(b"late-") for _, value in got)  # type: ignore[union-attr]
        else:
            client.check(consumer.error(), "OFFSET_OUT_OF_RANGE")
    finally:
        consumer.close()


# ---- ACLs and authentication ------------------------------------------------------------------------


def test_acl_denials_then_grants(start_server, client) -> None:  # noqa: F811
    server = start_server(api_keys_json=API_KEYS)
    topic = f"payroll-{client.name}"
    create_topic(server, topic, headers=ADMIN)
    produce(server, topic, "seed", headers=ADMIN)

    producer = client.producer(server.bootstrap, BOB)
    fresh = None
    try:
        with pytest.raises(Exception) as denied:  # no rights: the topic's metadata is refused
            producer.send(topic, b"bob-1")
        client.check(denied.value, "TOPIC_AUTHORIZATION_FAILED")
        grant(server, "topic", topic, "describe")
        fresh = client.producer(server.bootstrap, BOB)  # no cached metadata: this refusal is the produce's
        with pytest.raises(Exception) as denied:  # it may see the topic, not write it
            fresh.send(topic, b"bob-2")
        client.check(denied.value, "TOPIC_AUTHORIZATION_FAILED")
        grant(server, "topic", topic, "write")
        offsets = [eventually(lambda: producer.send(topic, b"bob-3")),  # the producer refused first
                   eventually(lambda: fresh.send(topic, b"bob-4"))]
    finally:
        producer.close()
        if fresh is not None:
            fresh.close()
    assert log_range(server, topic, ADMIN) == (0, 3) and offsets == [1, 2]

    group = f"payroll-readers-{client.name}"
    grant(server, "group", group, "read")
    consumer = client.consumer(server.bootstrap, topic, group, "earliest", BOB)
    try:  # it may describe the topic and read the group, not read the topic: the fetch is refused
        client.check(consumer.error(), "TOPIC_AUTHORIZATION_FAILED")
        grant(server, "topic", topic, "read")
        assert [v for _, v in eventually(lambda: consumer.records(count=3))] == [b"seed", b"bob-3", b"bob-4"]
    finally:
        consumer.close()

    other = f"auditors-{client.name}"
    consumer = client.consumer(server.bootstrap, topic, other, "earliest", BOB)
    try:
        client.check(consumer.error(), "GROUP_AUTHORIZATION_FAILED")  # FindCoordinator: no describe
        grant(server, "group", other, "describe")
        client.check(consumer.error(), "GROUP_AUTHORIZATION_FAILED")  # JoinGroup: no read
        grant(server, "group", other, "read")
        assert [v for _, v in eventually(lambda: consumer.records(count=3))] == [b"seed", b"bob-3", b"bob-4"]
    finally:
        consumer.close()
    assert_topic_intact(server.root, topic)


def test_wrong_password_fails_authentication(start_server, client, caplog) -> None:  # noqa: F811
    server = start_server(api_keys_json=API_KEYS)
    caplog.set_level(logging.INFO)
    errors = client.authentication_errors(server.bootstrap, ("bob", "not-bobs-key"), caplog)
    refusals = [e for e in errors if client.is_error(e, "SASL_AUTHENTICATION_FAILED")]
    assert refusals, f"no authentication failure among {errors!r}"
    assert all("invalid SASL/PLAIN credentials" in str(e) for e in refusals)  # lakelog's message reached it
