"""Every (API, version) lakelog serves round-trips through its codec, and every one it does not serve is
refused as Kafka refuses it: the connection closes, except ApiVersions, answered UNSUPPORTED_VERSION in
v0 with the versions served (KIP-511). Never a well-formed empty answer."""

from __future__ import annotations

import asyncio
import struct
import uuid
from typing import Any

import pytest
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.schemas.fields.codecs import (
    UUID,
    BitField,
    Boolean,
    Bytes,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    String,
    UnsignedInt16,
)

from lakelog.kafka_api import listener, protocol
from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import CODES

SERVED = [(api, version) for api, (lo, hi) in sorted(protocol.SUPPORTED.items()) for version in range(lo, hi + 1)]


def _simple(field: Any, seed: int) -> Any:
    kind = field._type
    if isinstance(kind, String) or kind is String:
        return f"s{seed}"
    values = {Int8: seed % 100, Int16: seed, UnsignedInt16: seed, Int32: seed * 1000, Int64: seed * 10**9,
              Float64: seed + 0.5, Boolean: True, Bytes: b"b%d" % seed, UUID: uuid.UUID(int=seed),
              BitField: {seed % 31, 3}}
    return values[kind]


def sample(cls: type, version: int, seed: int = 1) -> Any:
    """An instance of a message (or nested struct) class with every field of `version` set to a value
    unlike its default, so a field lost or misplaced by the codec shows."""
    values: dict[str, Any] = {}
    for n, field in enumerate(cls.fields.values(), start=seed):
        if not field.for_version_q(version):
            continue
        if field.is_struct_array():
            values[field.name] = [sample(getattr(cls, field.type_str), version, n + 1)]
        elif field.is_struct():
            values[field.name] = sample(getattr(cls, field.type_str), version, n + 1)
        elif field.is_array():
            values[field.name] = [_simple(field.array_of, n)]
        else:
            values[field.name] = _simple(field, n)
    return cls(version=version, **values)


def request_frame(request: Any, version: int, correlation_id: int = 42) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="round-trip")
    return bytes(request.encode(header=True))


SHARE_GROUP_APIS = {ApiKey.ShareGroupHeartbeat, ApiKey.ShareGroupDescribe, ApiKey.ShareFetch, ApiKey.ShareAcknowledge}


def test_the_table_is_kafka_3_9_s_ranges_down_to_v0() -> None:
    assert all(lo == (1 if api in SHARE_GROUP_APIS else 0) for api, (lo, _) in protocol.SUPPORTED.items())
    for api, (_, hi) in protocol.SUPPORTED.items():  # the codec has a schema for every version served
        assert hi <= protocol.REQUESTS[api].max_version and hi <= protocol.RESPONSES[api].max_version


@pytest.mark.parametrize("api,version", SERVED, ids=[f"{api.name}-v{v}" for api, v in SERVED])
def test_every_served_version_round_trips(api: ApiKey, version: int) -> None:
    sent = sample(protocol.REQUESTS[api], version)
    call = protocol.decode(request_frame(sent, version))
    assert (call.api_key, call.version, call.correlation_id, call.client_id) == (api, version, 42, "round-trip")
    assert call.body.to_dict() == sent.to_dict()

    response_class = protocol.RESPONSES[api]
    answered = sample(response_class, version, seed=3)
    if api == ApiKey.ApiVersions:
        answered.error_code = 0  # an ApiVersions error is read (and answered) in v0, KIP-511
    answer = call.answer(answered)
    assert struct.unpack_from(">i", answer)[0] == len(answer) - 4
    read = response_class.decode(answer, version=version, header=True, framed=True)
    assert read.header.correlation_id == 42
    assert read.to_dict() == answered.to_dict()


def unserved() -> list[tuple[int, int]]:
    pairs = []
    for api in protocol.REQUESTS:
        lo, hi = protocol.SUPPORTED.get(api, (0, -1))  # type: ignore[call-overload]
        pairs += [(api, v) for v in range(0, protocol.REQUESTS[api].max_version + 2) if not lo <= v <= hi]
    return pairs + [(999, 0), (-1, 0), (ApiKey.Fetch, 32767)]


class Writer:
    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


async def serve(frames: bytes) -> Writer:
    """One connection fed `frames`, then left open: returns when the listener closed it or went idle."""
    reader = asyncio.StreamReader()
    reader.feed_data(frames)
    writer = Writer()
    connection = listener.Connection(Context(lambda: None, ("127.0.0.1", 9092), peer="test"), reader,
                                     writer)  # type: ignore[arg-type]
    serving = asyncio.create_task(connection.run())
    done, _ = await asyncio.wait([serving], timeout=0.5)
    if not done:  # still reading: the connection stayed open (the end of the input closes it now)
        reader.feed_eof()
        await asyncio.gather(serving, return_exceptions=True)
        writer.closed = False
    return writer


def header_only(api: int, version: int, correlation_id: int = 5, client_id: bytes = b"old") -> bytes:
    body = struct.pack(">hhih", api, version, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def test_every_unserved_version_and_api_closes_the_connection_without_an_answer() -> None:
    pairs = [(api, v) for api, v in unserved() if api != ApiKey.ApiVersions]
    assert (ApiKey.Metadata, 13) in pairs and (ApiKey.Fetch, 13) in pairs and (ApiKey.EndTxn, 5) in pairs

    async def run() -> list[tuple[int, int]]:
        answered_or_open = []
        for api, version in pairs:
            # A served request after it would be answered if the connection were still read.
            ping = header_only(ApiKey.ApiVersions, 0, correlation_id=6)
            writer = await serve(header_only(api, version) + ping)
            if writer.data or not writer.closed:
                answered_or_open.append((api, version))
        return answered_or_open

    assert asyncio.run(run()) == []


def test_an_unserved_api_versions_is_answered_in_v0_and_the_connection_stays_open() -> None:
    async def run() -> Writer:
        return await serve(header_only(ApiKey.ApiVersions, 9, correlation_id=5)
                           + header_only(ApiKey.ApiVersions, 0, correlation_id=6))

    writer = asyncio.run(run())
    first_size = struct.unpack_from(">i", writer.data)[0]
    first = ApiVersionsResponse.decode(bytes(writer.data[:4 + first_size]), version=0, header=True, framed=True)
    assert first.header.correlation_id == 5 and first.error_code == CODES["UNSUPPORTED_VERSION"]
    assert {(k.api_key, k.min_version, k.max_version) for k in first.api_keys} == {
        (int(key), lo, hi) for key, (lo, hi) in protocol.SUPPORTED.items()}
    second = bytes(writer.data[4 + first_size:])
    assert struct.unpack_from(">i", second, 4)[0] == 6  # the next request was read and answered
