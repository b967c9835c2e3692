"""Old protocol versions against a running server, over a socket: what sarama's and librdkafka's older
defaults, kafka-python's `api_version=(0, 8, 2)` and lag checkers send. Each answer is checked against the
HTTP API of the same server: Metadata v0 lists the brokers and topics, ListOffsets v0 the real offsets,
OffsetCommit v0-v2 store offsets, Produce v0-v2 message sets (magic 0 and 1) write records, Fetch v0-v3
answer message sets. A version not served closes the connection, never an empty success."""

from __future__ import annotations

import logging
import socket
import struct
import time
from typing import Any, Iterator

import httpx
import pytest
from kafka.protocol.consumer import (
    FetchRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from lakelog.kafka_api import protocol, sasl
from tests.http.conftest import create_topic, fetch_all, shared_server, start_server  # noqa: F401 (fixtures)
from tests.patience import STUCK_S

TIME = 1_700_000_000_000


class Wire:
    """One raw Kafka connection: requests encoded by kafka-python's message classes at a chosen version."""

    def __init__(self, bootstrap: str, client_id: str = "old-client") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.client_id = client_id
        self.correlation_id = 0

    def send(self, request: Any, version: int) -> None:
        self.correlation_id += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.correlation_id, client_id=self.client_id)
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))

    def call(self, request: Any, version: int) -> Any:
        self.send(request, version)
        frame = self._read(struct.unpack(">i", self._read(4))[0])
        answer = protocol.RESPONSES[request.API_KEY].decode(frame, version=version, header=True)
        assert answer.header.correlation_id == self.correlation_id
        return answer

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            data += chunk
        return data

    def closed_by_server(self) -> bool:
        self.sock.settimeout(30)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server(shared_server: Any) -> Any:  # noqa: F811
    return shared_server


@pytest.fixture
def wire(server: Any) -> Iterator[Wire]:
    connection = Wire(server.bootstrap)
    yield connection
    connection.close()


@pytest.fixture
def http(server: Any) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def produce_http(http: httpx.Client, topic: str, partition: int, count: int) -> None:
    records = [{"key": f"k{i}", "value": f"v{i}", "partition": partition, "timestamp": TIME + i,
                "headers": [{"key": "h", "value": "x"}]} for i in range(count)]
    response = http.post(f"/v1/topics/{topic}/records", json={"records": records})
    assert response.status_code == 200, response.text


def test_metadata_v0_lists_the_brokers_and_every_topic(server: Any, http: httpx.Client, wire: Wire) -> None:
    create_topic(http, "meta-v0", partitions=3)
    answer = wire.call(MetadataRequest(topics=[]), 0)  # v0: an empty list asks for every topic
    (broker,) = answer.brokers
    assert f"{broker.host}:{broker.port}" == server.bootstrap
    topics = {t.name: t for t in answer.topics}
    assert "meta-v0" in topics and topics["meta-v0"].error_code == 0
    assert sorted(p.partition_index for p in topics["meta-v0"].partitions) == [0, 1, 2]
    assert {p.leader_id for p in topics["meta-v0"].partitions} == {broker.node_id}

    named = wire.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="meta-v0")]), 0)
    assert [t.name for t in named.topics] == ["meta-v0"]


def test_list_offsets_v0_answers_the_real_offsets(http: httpx.Client, wire: Wire) -> None:
    create_topic(http, "offsets-v0", partitions=2)
    produce_http(http, "offsets-v0", 1, 7)
    Topic = ListOffsetsRequest.ListOffsetsTopic
    Partition = Topic.ListOffsetsPartition

    def offsets(partition: int, timestamp: int, most: int = 1) -> list[int]:
        request = ListOffsetsRequest(replica_id=-1, topics=[Topic(name="offsets-v0", partitions=[
            Partition(partition_index=partition, timestamp=timestamp, max_num_offsets=most)])])
        (answered,) = wire.call(request, 0).topics[0].partitions
        assert answered.error_code == 0
        return list(answered.old_style_offsets)

    assert offsets(1, -1) == [7] and offsets(1, -2) == [0]  # latest, earliest
    assert offsets(0, -1) == [0]  # an empty partition
    assert offsets(1, TIME + 3) == [3]  # the first record at or after the time
    assert offsets(1, TIME + 99) == [7]  # none after it: the log end
    assert offsets(1, -1, most=0) == []


@pytest.mark.parametrize("version", [0, 1, 2])
def test_offset_commit_v0_to_v2_stores_the_offsets(http: httpx.Client, wire: Wire, version: int) -> None:
    topic, group = f"commit-v{version}", f"lag-checker-v{version}"
    create_topic(http, topic, partitions=2)
    produce_http(http, topic, 0, 5)
    produce_http(http, topic, 1, 5)
    Topic = OffsetCommitRequest.OffsetCommitRequestTopic
    Partition = Topic.OffsetCommitRequestPartition
    request = OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", retention_time_ms=-1,
        topics=[Topic(name=topic, partitions=[
            Partition(partition_index=0, committed_offset=4, commit_timestamp=TIME, committed_metadata="m0"),
            Partition(partition_index=1, committed_offset=2, commit_timestamp=-1, committed_metadata=None)])])
    answered = wire.call(request, version)
    assert [(p.partition_index, p.error_code) for p in answered.topics[0].partitions] == [(0, 0), (1, 0)]

    stored = http.get(f"/v1/groups/{group}/offsets").json()["offsets"]
    assert {(o["partition"], o["offset"]) for o in stored if o["topic"] == topic} == {(0, 4), (1, 2)}
    assert sum(o["offset"] for o in stored) == 6  # the committed offsets, not 0

    fetch_topic = OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])
    for fetch_version in (0, 1):  # read back as an old consumer does
        read = wire.call(OffsetFetchRequest(group_id=group, topics=[fetch_topic]), fetch_version)
        assert [(p.partition_index, p.committed_offset, p.error_code) for p in read.topics[0].partitions] == [
            (0, 4, 0), (1, 2, 0)]


def message_set(magic: int, codec: int = 0) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, codec, batch_size=1 << 20)
    for i in range(3):
        builder.append(i, timestamp=TIME + 10 * i, key=b"key-%d" % i, value=b"value-%d" % i)
    return bytes(builder.build())


@pytest.mark.parametrize("version,magic,codec", [(0, 0, 0), (1, 0, 1), (2, 1, 0), (2, 1, 1)],
                         ids=["v0-magic0", "v1-magic0-gzip", "v2-magic1", "v2-magic1-gzip"])
def test_produce_v0_to_v2_message_sets_are_written(http: httpx.Client, wire: Wire, version: int, magic: int,
                                                    codec: int) -> None:
    topic = f"produce-v{version}-m{magic}-c{codec}"
    create_topic(http, topic, partitions=2)
    produce_http(http, topic, 1, 2)  # the batch lands after these
    Data = ProduceRequest.TopicProduceData
    request = ProduceRequest(acks=1, timeout_ms=10_000, topic_data=[Data(name=topic, partition_data=[
        Data.PartitionProduceData(index=1, records=message_set(magic, codec))])])
    before = int(time.time() * 1000)
    (answered,) = wire.call(request, version).responses[0].partition_responses
    assert (answered.index, answered.error_code, answered.base_offset) == (1, 0, 2)

    written = fetch_all(http, topic, 1)[2:]
    assert [(r["offset"], r["key"], r["value"], r["headers"]) for r in written] == [
        (2 + i, f"key-{i}", f"value-{i}", []) for i in range(3)]
    if magic == 1:  # CreateTime, as sent
        assert [r["timestamp"] for r in written] == [TIME, TIME + 10, TIME + 20]
    else:  # magic 0 has no timestamps: the broker's time
        assert all(r["timestamp"] >= before - 1000 for r in written)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_v0_to_v3_answer_message_sets(http: httpx.Client, wire: Wire, version: int) -> None:
    topic = f"fetch-v{version}"
    create_topic(http, topic, partitions=1)
    produce_http(http, topic, 0, 4)
    Topic = FetchRequest.FetchTopic
    request = FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, topics=[Topic(
        topic=topic, partitions=[Topic.FetchPartition(partition=0, fetch_offset=1, partition_max_bytes=1 << 20)])])
    (partition,) = wire.call(request, version).responses[0].partitions
    assert (partition.error_code, partition.high_watermark) == (0, 4)
    read = [record for batch in MemoryRecords(bytes(partition.records)) for record in batch]
    magic = 0 if version <= 1 else 1
    assert {record.magic for record in read} == {magic}
    assert [(r.offset, r.key, r.value) for r in read] == [(i, b"k%d" % i, b"v%d" % i) for i in (1, 2, 3)]
    assert [r.timestamp for r in read] == ([None] * 3 if magic == 0 else [TIME + i for i in (1, 2, 3)])


@pytest.mark.parametrize("api,version", [(MetadataRequest, 13), (FetchRequest, 13), (ProduceRequest, 12)])
def test_a_version_not_served_closes_the_connection(wire: Wire, api: Any, version: int) -> None:
    request = api()
    wire.send(request, version)
    assert wire.closed_by_server()  # no answer at all: the client sees the refusal, not an empty success


@pytest.mark.parametrize("api_version", [(0, 8, 2), (0, 9), (0, 10, 0)])
def test_kafka_python_speaking_old_brokers_versions_produces_consumes_and_commits(
        http: httpx.Client, server: Any, api_version: tuple[int, ...]) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    name = "old-" + "-".join(map(str, api_version))
    topic, group = f"{name}-topic", f"{name}-group"
    create_topic(http, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, api_version=api_version, compression_type="gzip")
    sent = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, timestamp_ms=TIME + i) for i in range(20)]
    producer.flush(STUCK_S)
    offsets = [(m.partition, m.offset) for m in (f.get(STUCK_S) for f in sent)]
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, api_version=api_version, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    if api_version < (0, 9):  # no group membership before 0.9: partitions are assigned by hand
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    else:
        consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + STUCK_S
    while len(got) < 20 and time.monotonic() < deadline:
        got += [r for records in consumer.poll(500).values() for r in records]
    consumer.commit()
    consumer.close()
    assert sorted((r.partition, r.offset) for r in got) == sorted(offsets)
    assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(20))
    committed = http.get(f"/v1/groups/{group}/offsets").json()["offsets"]
    assert sum(o["offset"] for o in committed) == 20  # every record, committed
    stored = {r["value"]: r["timestamp"] for p in (0, 1) for r in fetch_all(http, topic, p)}
    if api_version >= (0, 10):  # magic 1 carries the producer's timestamps
        assert stored == {f"v{i}": TIME + i for i in range(20)}


@pytest.mark.parametrize("fallback", ["0.9.0", "0.10.0"])
def test_librdkafka_without_api_versions_round_trips_lz4(http: httpx.Client, server: Any, fallback: str) -> None:
    """librdkafka with `api.version.request=false` speaks its fallback broker's versions: magic 0 (with
    0.8's lz4 frames) or magic 1, produced and fetched, in a group that commits."""
    from confluent_kafka import Consumer, Producer

    topic, group = f"rdkafka-{fallback}", f"rdkafka-{fallback}-group"
    create_topic(http, topic, partitions=2, **{"compression.type": "lz4"})  # fetched batches in lz4 too
    config = {"bootstrap.servers": server.bootstrap, "api.version.request": False,
              "broker.version.fallback": fallback, "log_level": 3}
    producer = Producer({**config, "compression.codec": "lz4"})
    for i in range(10):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i * 50, timestamp=TIME + i)
    assert producer.flush(STUCK_S) == 0
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + STUCK_S
    while len(got) < 10 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            assert message.error() is None, message.error()
            got.append(message)
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(m.value() for m in got) == sorted(b"v%d" % i * 50 for i in range(10))
    if fallback == "0.10.0":
        assert sorted(m.timestamp()[1] for m in got) == [TIME + i for i in range(10)]
    committed = http.get(f"/v1/groups/{group}/offsets").json()["offsets"]
    assert sum(o["offset"] for o in committed) == 10


def test_sasl_handshake_v0_takes_the_raw_token(start_server: Any, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                               caplog: pytest.LogCaptureFixture) -> None:
    """kafka-python at (0, 10, 0) authenticates with SaslHandshake v0 and a raw SASL/PLAIN frame."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    raw_tokens: list[bytes] = []
    authenticate_raw = sasl.authenticate_raw
    monkeypatch.setattr(sasl, "authenticate_raw", lambda context, token: (raw_tokens.append(token),
                                                                          authenticate_raw(context, token)))
    server = start_server(api_keys_json='{"k-admin": "admin"}')
    with server.client(headers={"authorization": "Bearer k-admin"}) as http:
        create_topic(http, "sasl-v0")
    config = dict(bootstrap_servers=server.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                  api_version=(0, 10, 0), sasl_plain_username="admin")
    producer = KafkaProducer(sasl_plain_password="k-admin", **config)
    assert producer.send("sasl-v0", value=b"authenticated").get(STUCK_S).offset == 0
    producer.close()
    assert raw_tokens and raw_tokens[0].endswith(b"\0admin\0k-admin")  # a raw frame, not a SaslAuthenticate

    caplog.set_level(logging.WARNING)
    with pytest.raises(KafkaError):  # a wrong key: the connection is closed, the client gives up
        KafkaProducer(sasl_plain_password="nope", max_block_ms=3000, **config).send("sasl-v0", value=b"x").get(10)
    assert any("SaslHandshake v0: SASL_AUTHENTICATION_FAILED" in r.getMessage() for r in caplog.records)
