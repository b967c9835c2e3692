"""How unmodified Kafka clients report the errors lakelog's Kafka listener answers: each of kafka-python,
confluent-kafka and aiokafka behind one adapter (`ERRORS` maps Kafka's error name to the client's own, and
`check` asserts it), with a producer and a consumer of each and the `client` fixture that runs a test once
per client; and the HTTP calls the error tests set a server up with.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Iterator

import aiokafka.errors
import httpx
import kafka.errors
import pytest
from confluent_kafka import KafkaError, KafkaException

from tests.http.conftest import ThreadServer
from tests.patience import STUCK_S

Sasl = tuple[str, str] | None
Records = list[tuple[int, bytes | None]]  # (offset, value)


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
