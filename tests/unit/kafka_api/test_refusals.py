"""Every refusal is logged at WARNING with the client id, the API and the version, once a minute per
(client id, API, version, cause): a client retrying a refused request in a loop writes one line."""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any

import pytest
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from lakelog.kafka_api import listener, refusals
from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import CODES
from tests.unit.kafka_api.test_versions import Writer, header_only

Topic = ProduceResponse.TopicProduceResponse
Partition = Topic.PartitionProduceResponse


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(refusals, "REFUSALS", refusals.RefusalLog(clock=clock))
    return clock


def connect(frames: bytes) -> None:
    async def run() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(frames)
        reader.feed_eof()
        connection = listener.Connection(Context(lambda: None, ("127.0.0.1", 9092), peer="10.0.0.7"), reader,
                                         Writer())  # type: ignore[arg-type]
        await asyncio.gather(connection.run(), return_exceptions=True)

    asyncio.run(run())


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_repeated_identical_refusals_write_one_warning(caplog: pytest.LogCaptureFixture, clock: Clock) -> None:
    caplog.set_level(logging.WARNING)
    for _ in range(5):  # a client reconnecting and asking again, as sarama does
        connect(header_only(ApiKey.Metadata, 13, client_id=b"sarama"))
    (line,) = warnings(caplog)
    assert "'sarama'" in line and "10.0.0.7" in line and "Metadata v13" in line
    assert "UNSUPPORTED_VERSION" in line and "served 0-12" in line and "connection closed" in line

    connect(header_only(ApiKey.Metadata, 14, client_id=b"sarama"))  # another version: its own line
    connect(header_only(ApiKey.Metadata, 13, client_id=b"franz"))  # another client: its own line
    connect(header_only(999, 0, client_id=b"sarama"))  # an unknown API
    assert len(warnings(caplog)) == 4 and "api key 999 v0: unknown API" in warnings(caplog)[-1]

    clock.now += refusals.WINDOW_S  # a minute later the same refusal is worth a line again
    connect(header_only(ApiKey.Metadata, 13, client_id=b"sarama"))
    assert len(warnings(caplog)) == 5


def test_an_undecodable_request_is_logged_and_closed(caplog: pytest.LogCaptureFixture, clock: Clock) -> None:
    caplog.set_level(logging.WARNING)
    body = struct.pack(">hhih", ApiKey.Metadata, 1, 5, 3) + b"bad" + b"\xff\xff\xff"  # a topic array cut short
    for _ in range(3):
        connect(struct.pack(">i", len(body)) + body)
    (line,) = warnings(caplog)
    assert "'bad'" in line and "Metadata v1: undecodable request" in line and "connection closed" in line


def test_per_item_protocol_errors_are_refusals_too(caplog: pytest.LogCaptureFixture, clock: Clock,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    async def corrupt(context: Context, call: Any) -> ProduceResponse:
        partitions = [Partition(index=0, error_code=CODES["CORRUPT_MESSAGE"], error_message="record batch CRC "
                                "mismatch"), Partition(index=1, error_code=CODES["NOT_LEADER_OR_FOLLOWER"])]
        return ProduceResponse(responses=[Topic(name="t", partition_responses=partitions)])

    monkeypatch.setitem(listener.HANDLERS, ApiKey.Produce, corrupt)
    caplog.set_level(logging.WARNING)
    produce = protocol_frame()
    connect(produce + produce + produce)
    (line,) = warnings(caplog)  # CORRUPT_MESSAGE once; NOT_LEADER_OR_FOLLOWER is no refusal
    assert "Produce v3: CORRUPT_MESSAGE: record batch CRC mismatch" in line and "connection closed" not in line


def protocol_frame() -> bytes:
    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=100, topic_data=[])
    request.API_VERSION = 3
    request.with_header(correlation_id=1, client_id="producer")
    return bytes(request.encode(header=True, framed=True))


def test_refusal_codes_are_found_anywhere_in_a_response() -> None:
    response = ProduceResponse(responses=[Topic(name="t", partition_responses=[
        Partition(index=0, error_code=0), Partition(index=1, error_code=CODES["INVALID_RECORD"], error_message="m"),
        Partition(index=2, error_code=CODES["INVALID_RECORD"], error_message="n")])])
    assert refusals.item_refusals(response) == {CODES["INVALID_RECORD"]: "m"}
    assert refusals.item_refusals(ProduceResponse(responses=[])) == {}


def test_the_api_versions_downgrade_every_newer_client_makes_is_no_warning(caplog: pytest.LogCaptureFixture,
                                                                          clock: Clock) -> None:
    caplog.set_level(logging.INFO)
    connect(header_only(ApiKey.ApiVersions, 4, client_id=b"kafka-python-3"))  # answered in v0 (KIP-511)
    assert warnings(caplog) == []
    assert any("ApiVersions v4: UNSUPPORTED_VERSION" in r.getMessage() for r in caplog.records
               if r.levelno == logging.INFO)


def test_a_call_failing_whole_without_an_error_field_closes_instead_of_answering_empty(
        caplog: pytest.LogCaptureFixture, clock: Clock) -> None:
    request = MetadataRequest(topics=[])
    request.API_VERSION = 0  # no error code at the top of a v0 answer: an empty one would say "no topics"
    request.with_header(correlation_id=1, client_id="sarama")
    writer = Writer()

    async def run() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(bytes(request.encode(header=True, framed=True)))  # the server is not ready: it fails
        writer.close = lambda: (setattr(writer, "closed", True), reader.feed_eof())  # as a socket's end does
        connection = listener.Connection(Context(lambda: None, ("127.0.0.1", 9092)), reader,
                                         writer)  # type: ignore[arg-type]
        with pytest.raises(asyncio.IncompleteReadError):  # the listener closed it: its reader sees the end
            await asyncio.wait_for(connection.run(), 5)

    caplog.set_level(logging.WARNING)
    asyncio.run(run())
    assert writer.closed and not writer.data
    (line,) = warnings(caplog)
    assert "'sarama'" in line and "Metadata v0" in line and "connection closed" in line
