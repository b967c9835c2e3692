"""Frames in, frames out: request decoding, response encoding and the API versions lakelog serves.

The message schemas are kafka-python's, generated from Kafka's JSON message definitions, so every
version (flexible ones with compact fields and tagged fields included) comes from the same source as
Kafka's own. lakelog serves the versions below: the ones current kafka-python, aiokafka and librdkafka
negotiate, capped where a newer version needs something lakelog does not keep (topic ids, Fetch
sessions' leader epochs, transactions).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import kafka.protocol.admin  # noqa: F401  (registers the admin messages)
import kafka.protocol.consumer  # noqa: F401
import kafka.protocol.metadata  # noqa: F401
import kafka.protocol.producer  # noqa: F401
import kafka.protocol.sasl  # noqa: F401
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsResponse

from lakelog.kafka_api.errors import CODES, KafkaProtocolError

# (lowest, highest) version served, per API. Produce starts at 3 (v2 record batches), as in Kafka 4.
SUPPORTED: dict[ApiKey, tuple[int, int]] = {
    ApiKey.Produce: (3, 9),
    ApiKey.Fetch: (4, 12),
    ApiKey.ListOffsets: (1, 7),
    ApiKey.Metadata: (1, 12),
    ApiKey.OffsetCommit: (2, 8),
    ApiKey.OffsetFetch: (1, 7),
    ApiKey.FindCoordinator: (0, 3),
    ApiKey.JoinGroup: (0, 7),
    ApiKey.Heartbeat: (0, 4),
    ApiKey.LeaveGroup: (0, 4),
    ApiKey.SyncGroup: (0, 5),
    ApiKey.DescribeGroups: (0, 5),
    ApiKey.ListGroups: (0, 4),
    ApiKey.SaslHandshake: (1, 1),  # v0 would mean raw SASL frames; v1 wraps them in SaslAuthenticate
    ApiKey.ApiVersions: (0, 3),
    ApiKey.CreateTopics: (0, 5),
    ApiKey.DeleteTopics: (0, 5),
    ApiKey.InitProducerId: (0, 4),
    ApiKey.DescribeConfigs: (0, 4),
    ApiKey.SaslAuthenticate: (0, 2),
    ApiKey.CreatePartitions: (0, 3),
    ApiKey.DeleteGroups: (0, 2),
    ApiKey.IncrementalAlterConfigs: (0, 1),
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

    def answer(self, response: ApiMessage) -> bytes:
        """The framed response to this call."""
        response.API_VERSION = self.version  # before the header: its setter assumes a request header
        response.with_header(correlation_id=self.correlation_id)
        return bytes(response.encode(header=True, framed=True))


def decode(frame: bytes) -> Call:
    """A request frame (without its size prefix). Raises Unanswerable for an API or version lakelog
    does not serve; it carries the answer to send."""
    if len(frame) < 8:
        raise KafkaProtocolError(f"a request frame of {len(frame)} bytes is shorter than a header")
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
    served = SUPPORTED.get(api_key)  # type: ignore[call-overload]
    if served is None or not served[0] <= version <= served[1]:
        raise Unanswerable(unsupported_answer(api_key, version, correlation_id))
    request = REQUESTS[api_key].decode(frame, version=version, header=True)
    return Call(api_key, version, correlation_id, request.header.client_id, request)


class Unanswerable(Exception):
    """A request outside what lakelog serves, with the answer that tells the client so."""

    def __init__(self, answer: bytes | None) -> None:
        super().__init__("unsupported API or version")
        self.answer = answer


def api_versions_response(error_code: int = 0) -> ApiVersionsResponse:
    keys = [ApiVersionsResponse.ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(SUPPORTED.items())]
    return ApiVersionsResponse(error_code=error_code, api_keys=keys, throttle_time_ms=0)


def unsupported_answer(api_key: int, version: int, correlation_id: int) -> bytes | None:
    """UNSUPPORTED_VERSION in the shape the client can read: ApiVersions answers in v0 with the versions
    served (KIP-511); another API known to the codec answers its top-level error code where it has one.
    None: nothing the client could decode (an API unknown to the codec)."""
    if api_key == ApiKey.ApiVersions:
        return Call(api_key, 0, correlation_id, None, None).answer(api_versions_response(UNSUPPORTED_VERSION))
    return error_answer(api_key, version, correlation_id, UNSUPPORTED_VERSION)


def error_answer(api_key: int, version: int, correlation_id: int, code: int) -> bytes | None:
    """An answer carrying only `code`, in its top-level error field where the API has one (else an empty
    answer); None when the codec does not know the API at that version."""
    response_class = RESPONSES.get(api_key)
    if response_class is None or not 0 <= version <= response_class.max_version:
        return None
    fields = {"error_code": code} if "error_code" in response_class.fields else {}
    return Call(api_key, version, correlation_id, None, None).answer(response_class(**fields))
