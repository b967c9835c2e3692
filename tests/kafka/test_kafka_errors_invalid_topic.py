"""What Kafka clients see for a topic name Kafka could never have (1-249 characters of [a-zA-Z0-9._-], not "."
or ".."): INVALID_TOPIC_EXCEPTION (code 17), not UNKNOWN_TOPIC_OR_PARTITION, in the Metadata answer and in a
Produce answer, and nothing is created whether topics are created on first use or not. librdkafka's own test
0057-invalid_topic produces to such a name and expects the delivery to fail with it at once, not by timeout.
"""

from __future__ import annotations

import time

import httpx
import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from lakelog.kafka_api.errors import CODES
from tests.http import conftest as http_fixtures
from tests.kafka import raw_calls
from tests.patience import STUCK_S

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback

ILLEGAL = ["0057-invalid_topic$#!", "bad name", "x" * 250, ".."]


def one_record() -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, batch_size=1 << 20)
    builder.append(0, timestamp=int(time.time() * 1000), key=None, value=b"bad", headers=[])
    return bytes(builder.build())


@pytest.mark.parametrize("auto_create", [True, False])
def test_librdkafka_is_told_an_illegal_name_is_invalid(start_server, auto_create: bool) -> None:
    server = start_server(auto_create_topics_enable=auto_create)
    config = {"bootstrap.servers": server.bootstrap}
    described = AdminClient(config).list_topics(topic=ILLEGAL[0], timeout=STUCK_S).topics[ILLEGAL[0]]
    assert described.error is not None and described.error.code() == KafkaError.TOPIC_EXCEPTION, described.error

    producer = Producer(config)  # as librdkafka's test 0057: the delivery fails at once with TOPIC_EXCEPTION
    reports: list = []
    started = time.monotonic()
    producer.produce(ILLEGAL[0], b"bad", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(STUCK_S) == 0
    assert [err.code() for err in reports] == [KafkaError.TOPIC_EXCEPTION], reports
    assert time.monotonic() - started < 10
    assert httpx.get(f"{server.url}/v1/topics", timeout=STUCK_S).json()["topics"] == []


@pytest.mark.parametrize("name", ILLEGAL)
def test_produce_and_metadata_answer_invalid_topic_for_an_illegal_name(start_server, name: str) -> None:
    server = start_server()
    Data = ProduceRequest.TopicProduceData
    request = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[Data(name=name, partition_data=[
        Data.PartitionProduceData(index=0, records=one_record())])])
    (answer,) = raw_calls.call(server.bootstrap, request, 9).responses[0].partition_responses
    assert (answer.error_code, answer.base_offset, answer.log_start_offset) == (CODES["INVALID_TOPIC_EXCEPTION"],
                                                                                -1, -1)
    assert "topic name" in answer.error_message

    described = AdminClient({"bootstrap.servers": server.bootstrap}).list_topics(topic=name, timeout=STUCK_S)
    assert described.topics[name].error.code() == KafkaError.TOPIC_EXCEPTION
    assert httpx.get(f"{server.url}/v1/topics", timeout=STUCK_S).json()["topics"] == []
