"""Frames in, frames out: request decoding, response encoding and the API versions lakelog serves.

The message schemas are kafka-python's, generated from Kafka's JSON message definitions, so every
version (flexible ones with compact fields and tagged fields included) comes from the same source as
Kafka's own. lakelog serves every version Kafka 3.9 serves down to v0 (old clients, sarama's and
librdkafka's defaults among them, still send v0 and v1), capped at the top where a newer version needs
something lakelog does not keep (topic ids, batched lookups it does not implement).

A request outside the table is refused as Kafka refuses it: ApiVersions with UNSUPPORTED_VERSION in
v0 (KIP-511), anything else by closing the connection. Never an empty, error-free answer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import kafka.protocol.admin  # noqa: F401  (registers the admin messages)
import kafka.protocol.admin.transactions  # noqa: F401
import kafka.protocol.consumer  # noqa: F401
import kafka.protocol.metadata  # noqa: F401
import kafka.protocol.producer  # noqa: F401
import kafka.protocol.producer.transaction  # noqa: F401
import kafka.protocol.sasl  # noqa: F401
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsResponse

from lakelog.kafka_api import messages  # noqa: F401  (registers KIP-848's messages, which kafka-python lacks)
from lakelog.kafka_api.errors import CODES, KafkaProtocolError

# (lowest, highest) version served, per API: Kafka 3.9's ranges, capped where noted.
SUPPORTED: dict[ApiKey, tuple[int, int]] = {
    ApiKey.Produce: (0, 11),  # v0-v2 carry message sets (magic 0 and 1): batches.py converts them
    ApiKey.Fetch: (0, 12),  # v13+ name topics by id (lakelog has no topic ids); v0-v3 answer message sets
    ApiKey.ListOffsets: (0, 8),
    ApiKey.Metadata: (0, 12),
    ApiKey.OffsetCommit: (0, 9),
    ApiKey.OffsetFetch: (0, 7),  # v8+ batch several groups in one request: not implemented
    ApiKey.FindCoordinator: (0, 5),  # v6 (KIP-932 share groups) is Kafka 4's
    ApiKey.JoinGroup: (0, 9),
    ApiKey.Heartbeat: (0, 4),
    ApiKey.LeaveGroup: (0, 5),
    ApiKey.SyncGroup: (0, 5),
    ApiKey.DescribeGroups: (0, 5),
    ApiKey.ListGroups: (0, 5),
    ApiKey.SaslHandshake: (0, 1),  # v0: the SASL tokens follow as raw frames (the listener reads them)
    ApiKey.ApiVersions: (0, 3),
    ApiKey.CreateTopics: (0, 6),  # v7 answers topic ids
    ApiKey.DeleteTopics: (0, 5),  # v6 names topics by id
    ApiKey.InitProducerId: (0, 5),
    ApiKey.DescribeConfigs: (0, 4),
    ApiKey.SaslAuthenticate: (0, 2),
    ApiKey.CreatePartitions: (0, 3),
    ApiKey.DeleteGroups: (0, 2),
    ApiKey.IncrementalAlterConfigs: (0, 1),
    ApiKey.DeleteRecords: (0, 2),
    ApiKey.DescribeAcls: (0, 3),
    ApiKey.CreateAcls: (0, 3),
    ApiKey.DeleteAcls: (0, 3),
    ApiKey.AlterConfigs: (0, 2),
    ApiKey.DescribeLogDirs: (0, 4),
    ApiKey.OffsetDelete: (0, 0),
    ApiKey.DescribeCluster: (0, 2),
    ApiKey.DescribeProducers: (0, 0),
    ApiKey.AddPartitionsToTxn: (0, 3),  # v4+ batch transactions for brokers' verification (KIP-890): not served
    ApiKey.AddOffsetsToTxn: (0, 3),
    ApiKey.EndTxn: (0, 3),  # v4 adds TRANSACTION_ABORTABLE, v5 is KIP-890 part 2 (an epoch per transaction)
    ApiKey.TxnOffsetCommit: (0, 3),  # v4 adds TRANSACTION_ABORTABLE
    ApiKey.DescribeTransactions: (0, 0),
    ApiKey.ListTransactions: (0, 1),
    ApiKey.ConsumerGroupHeartbeat: (0, 1),  # KIP-848 (group.protocol=consumer): lakelog/kafka_api/messages
    ApiKey.ConsumerGroupDescribe: (0, 1),
    ApiKey.ShareGroupHeartbeat: (1, 1),  # KIP-932 (share groups) at Kafka 4.2's stable versions (v0 was 4.0's early
    ApiKey.ShareGroupDescribe: (1, 1),  # access); v2 of ShareFetch/ShareAcknowledge (KIP-1206, KIP-1222) is not
    ApiKey.ShareFetch: (1, 1),  # served
    ApiKey.ShareAcknowledge: (1, 1),
    ApiKey.DescribeShareGroupOffsets: (0, 0),
    ApiKey.AlterShareGroupOffsets: (0, 0),
    ApiKey.DeleteShareGroupOffsets: (0, 0),
}
UNSUPPORTED_VERSION = CODES["UNSUPPORTED_VERSION"]
MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes


def _messages(kind: str) -> dict[int, type[ApiMessage]]:
    found: dict[int, type[ApiMessage]] = {}
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None and cls.type == kind:
            found[cls.API_KEY] = cls
    return found


REQUESTS = _messages("request")
RESPONSES = _messages("response")


@dataclass(frozen=True)
class Call:
    """One decoded request: its API, version, correlation id, client id and body."""

    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any

    def answer(self, response: ApiMessage) -> bytes | bytearray:
        """The framed response to this call (kafka-python's own copy of its buffer: a Fetch's megabytes of
        records are not copied once more into bytes)."""
        response.API_VERSION = self.version  # before the header: its setter assumes a request header
        response.with_header(correlation_id=self.correlation_id)
        encoded: bytes | bytearray = response.encode(header=True, framed=True)
        return encoded


def decode(frame: bytes) -> Call:
    """A request frame (without its size prefix). Raises Unanswerable for an API or version lakelog
    does not serve (with the answer to send, if any)."""
    if len(frame) < 8:
        raise KafkaProtocolError(f"a request frame of {len(frame)} bytes is shorter than a header")
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
    served = SUPPORTED.get(api_key)
    if served is None or not served[0] <= version <= served[1]:
        raise Unanswerable(api_key, version, header_client_id(frame), unsupported_answer(api_key, correlation_id))
    request = REQUESTS[api_key].decode(frame, version=version, header=True)
    return Call(api_key, version, correlation_id, request.header.client_id, request)


def header_client_id(frame: bytes) -> str | None:
    """The client id of a request header of any version (a nullable int16-length string after the
    correlation id in every header version), for a request that is not decoded further."""
    if len(frame) < 10:
        return None
    size = struct.unpack_from(">h", frame, 8)[0]
    return None if size < 0 else frame[10:10 + size].decode("utf-8", "replace")


def api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api key {api_key}"


def served_range(api_key: int) -> str:
    served = SUPPORTED.get(api_key)
    return "not served" if served is None else f"served {served[0]}-{served[1]}"


class Unanswerable(Exception):
    """A request outside what lakelog serves. `answer` is what tells the client so (ApiVersions only);
    None: the connection is closed, as Kafka closes it."""

    def __init__(self, api_key: int, version: int, client_id: str | None, answer: bytes | None) -> None:
        self.api_key, self.version, self.client_id, self.answer = api_key, version, client_id, answer
        self.cause = "unknown API" if api_key not in SUPPORTED else "UNSUPPORTED_VERSION"
        super().__init__(f"{api_name(api_key)} v{version}: {self.cause} ({served_range(api_key)})")


def api_versions_response(error_code: int = 0) -> ApiVersionsResponse:
    keys = [ApiVersionsResponse.ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(SUPPORTED.items())]
    return ApiVersionsResponse(error_code=error_code, api_keys=keys, throttle_time_ms=0)


def unsupported_answer(api_key: int, correlation_id: int) -> bytes | None:
    """ApiVersions answers UNSUPPORTED_VERSION in v0 with the versions served (KIP-511), so the client can
    pick one and ask again; any other API gets nothing (the listener closes the connection, as Kafka does:
    an answer the client did not ask for in a version it may not read would be taken for a success)."""
    if api_key == ApiKey.ApiVersions:
        return bytes(Call(api_key, 0, correlation_id, None, None).answer(api_versions_response(UNSUPPORTED_VERSION)))
    return None


def error_answer(api_key: int, version: int, correlation_id: int, code: int) -> bytes | None:
    """An answer carrying only `code`, where the API has a top-level error code at that version; None
    when it has none (an answer without it would read as an empty success: the listener closes instead)."""
    response_class = RESPONSES.get(api_key)
    if response_class is None or not 0 <= version <= response_class.max_version:
        return None
    field = response_class.fields.get("error_code")
    if field is None or not field.for_version_q(version):
        return None
    return bytes(Call(api_key, version, correlation_id, None, None).answer(response_class(error_code=code)))
