"""confluent-kafka as a typed topic's user drives it: a validated topic created, values produced one by one
(each answered on its own), and consumed back as bytes."""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.patience import STUCK_S


def create_validated_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"confluent.value.schema.validation": "true"})
                         ])[topic].result(STUCK_S)


def produce_each(bootstrap: str, topic: str, values: list[bytes]) -> list[KafkaError | None]:
    """Each value to partition 0, flushed on its own: the delivery error of each (None when written)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    errors: list[KafkaError | None] = []
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=lambda err, _msg: errors.append(err))
        producer.flush(STUCK_S)
    return errors


def consume_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """The first `count` values of the topic, through a group consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    received: list[bytes] = []
    try:
        while len(received) < count:
            message = consumer.poll(STUCK_S)
            assert message is not None, f"only {len(received)} records consumed"
            assert message.error() is None, message.error()
            received.append(message.value())
    finally:
        consumer.close()
    return received
