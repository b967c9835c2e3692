"""The three Kafka clients the listener must serve, behind one small interface for the tests.

Each adapter does what a user of that client would: its own admin client, an idempotent producer with
acks=all, a group consumer that commits synchronously. Nothing here knows lakelog.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable, Sequence

Sent = tuple[bytes, bytes, list[tuple[str, bytes]], int]  # key, value, headers, timestamp ms


@dataclass(frozen=True)
class Received:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: int


class KafkaPython:
    name = "kafka-python"

    def create_topic(self, bootstrap: str, topic: str, partitions: int) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
        finally:
            admin.close()

    def produce(self, bootstrap: str, topic: str, records: Sequence[Sent]) -> list[tuple[int, int]]:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
        try:
            futures = [producer.send(topic, key=k, value=v, headers=h, timestamp_ms=t) for k, v, h, t in records]
            producer.flush(30)
            return [(m.partition, m.offset) for m in (f.get(30) for f in futures)]
        finally:
            producer.close()

    def consume(self, bootstrap: str, topic: str, group: str, count: int, timeout_s: float = 30,
                **config: object) -> list[Received]:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                 enable_auto_commit=False, **config)
        try:
            got: list[Received] = []
            deadline = time.monotonic() + timeout_s
            while len(got) < count and time.monotonic() < deadline:
                for records in consumer.poll(500).values():
                    got += [Received(r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp)
                            for r in records]
            consumer.commit()
            return got
        finally:
            consumer.close()


class Confluent:
    name = "confluent-kafka"

    def create_topic(self, bootstrap: str, topic: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures die with it
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)

    def produce(self, bootstrap: str, topic: str, records: Sequence[Sent]) -> list[tuple[int, int]]:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "partitioner": "murmur2_random", "linger.ms": 5})  # murmur2: the Java client's
        delivered: dict[int, tuple[int, int]] = {}
        errors: list[object] = []

        def report(i: int) -> Callable:
            return lambda err, msg: errors.append(err) if err else delivered.__setitem__(
                i, (msg.partition(), msg.offset()))

        for i, (k, v, h, t) in enumerate(records):
            producer.produce(topic, key=k, value=v, headers=h, timestamp=t, on_delivery=report(i))
        assert producer.flush(30) == 0 and not errors, errors
        return [delivered[i] for i in range(len(records))]

    def consume(self, bootstrap: str, topic: str, group: str, count: int, timeout_s: float = 30,
                **config: object) -> list[Received]:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, **config})
        consumer.subscribe([topic])
        try:
            got: list[Received] = []
            deadline = time.monotonic() + timeout_s
            while len(got) < count and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None or message.error():
                    continue
                got.append(Received(message.partition(), message.offset(), message.key(), message.value(),
                                    list(message.headers() or []), message.timestamp()[1]))
            if got:
                consumer.commit(asynchronous=False)
            return got
        finally:
            consumer.close()


class AioKafka:
    name = "aiokafka"

    def create_topic(self, bootstrap: str, topic: str, partitions: int) -> None:
        async def create() -> None:
            from aiokafka.admin import AIOKafkaAdminClient, NewTopic

            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(topic, partitions, 1)])
            finally:
                await admin.close()

        asyncio.run(create())

    def produce(self, bootstrap: str, topic: str, records: Sequence[Sent]) -> list[tuple[int, int]]:
        async def send() -> list[tuple[int, int]]:
            from aiokafka import AIOKafkaProducer

            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
            await producer.start()
            try:
                futures = [await producer.send(topic, key=k, value=v, headers=h, timestamp_ms=t)
                           for k, v, h, t in records]
                return [(m.partition, m.offset) for m in await asyncio.gather(*futures)]
            finally:
                await producer.stop()

        return asyncio.run(send())

    def consume(self, bootstrap: str, topic: str, group: str, count: int, timeout_s: float = 30,
                **config: object) -> list[Received]:
        async def read() -> list[Received]:
            from aiokafka import AIOKafkaConsumer

            consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                        auto_offset_reset="earliest", enable_auto_commit=False, **config)
            await consumer.start()
            try:
                got: list[Received] = []
                deadline = time.monotonic() + timeout_s
                while len(got) < count and time.monotonic() < deadline:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got += [Received(r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp)
                                for r in records]
                if got:
                    await consumer.commit()
                return got
            finally:
                await consumer.stop()

        return asyncio.run(read())


CLIENTS = [KafkaPython(), Confluent(), AioKafka()]
