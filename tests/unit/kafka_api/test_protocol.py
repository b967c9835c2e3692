"""kafka_api/protocol.py: requests decoded with their header, answers framed, and what lakelog does not
serve answered in a shape the client can read (KIP-511 for ApiVersions)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import ApiVersionsResponse, MetadataRequest, MetadataResponse

from lakelog.kafka_api import protocol
from lakelog.kafka_api.errors import CODES

KAFKA_PAGE = Path(__file__).resolve().parents[3] / "docs" / "guide" / "kafka.md"


def frame(request, version: int, correlation_id: int = 7) -> bytes:  # type: ignore[no-untyped-def]
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="test-client")
    return bytes(request.encode(header=True))


@pytest.mark.parametrize("version", [1, 9, 12])  # non-flexible and flexible (compact, tagged) headers
def test_a_request_decodes_with_its_header_and_is_answered_framed(version: int) -> None:
    call = protocol.decode(frame(MetadataRequest(topics=None, allow_auto_topic_creation=False), version))
    assert (call.api_key, call.version, call.correlation_id, call.client_id) == (ApiKey.Metadata, version, 7,
                                                                                 "test-client")
    answer = call.answer(MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=1,
                                          topics=[]))
    assert struct.unpack_from(">i", answer)[0] == len(answer) - 4
    decoded = MetadataResponse.decode(answer, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == 7 and decoded.controller_id == 1


def test_an_api_versions_request_of_an_unknown_version_is_answered_in_v0_with_what_is_served() -> None:
    request = struct.pack(">hhih", ApiKey.ApiVersions, 99, 5, -1)
    with pytest.raises(protocol.Unanswerable) as unanswerable:
        protocol.decode(request)
    answer = ApiVersionsResponse.decode(unanswerable.value.answer, version=0, header=True, framed=True)
    assert answer.error_code == CODES["UNSUPPORTED_VERSION"]
    assert {(k.api_key, k.min_version, k.max_version) for k in answer.api_keys} == {
        (int(key), lo, hi) for key, (lo, hi) in protocol.SUPPORTED.items()}


def test_an_api_or_version_not_served_gets_no_answer_but_what_to_log() -> None:
    for api_key, version in ((ApiKey.EndTxn, 5), (ApiKey.Metadata, 13), (999, 0)):
        with pytest.raises(protocol.Unanswerable) as unanswerable:
            protocol.decode(struct.pack(">hhih", api_key, version, 9, 3) + b"old")
        assert unanswerable.value.answer is None  # the listener closes the connection, as Kafka does
        assert (unanswerable.value.api_key, unanswerable.value.version, unanswerable.value.client_id) == (
            api_key, version, "old")
    assert unanswerable.value.cause == "unknown API"


@pytest.mark.parametrize("api_key,version,has_error_field", [
    (ApiKey.JoinGroup, 0, True), (ApiKey.Metadata, 0, False), (ApiKey.Fetch, 6, False), (ApiKey.Fetch, 7, True),
    (ApiKey.FindCoordinator, 3, True), (ApiKey.FindCoordinator, 4, False), (ApiKey.OffsetFetch, 1, False)])
def test_an_error_answer_exists_only_where_the_version_has_a_top_level_error_code(
        api_key: ApiKey, version: int, has_error_field: bool) -> None:
    answer = protocol.error_answer(api_key, version, 9, CODES["INVALID_REQUEST"])
    assert (answer is not None) == has_error_field
    if answer is not None:
        read = protocol.RESPONSES[api_key].decode(answer, version=version, header=True, framed=True)
        assert read.error_code == CODES["INVALID_REQUEST"]


def test_the_readme_table_lists_the_versions_served() -> None:
    rows = re.findall(r"^\| (\w+) \| (\d+) \| (\d+)–(\d+) \|", KAFKA_PAGE.read_text(), flags=re.M)
    assert {(name, int(key), int(lo), int(hi)) for name, key, lo, hi in rows} == {
        (key.name, int(key), lo, hi) for key, (lo, hi) in protocol.SUPPORTED.items()}
