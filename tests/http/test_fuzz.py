"""Fuzzing from the server's own OpenAPI document (schemathesis): no 5xx but 503, the server stays up,
and no topic gains a record from a rejected request."""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from lakelog.platform.catalog.catalog import MAX_PARTITIONS
from log_check import assert_root_intact
from tests.patience import STUCK_S
from tests.http.conftest import ThreadServer, end_offsets, make_settings

pytestmark = pytest.mark.slow
EXAMPLES_PER_OPERATION = 30
MIN_CASES = 500
FUZZ_TOPIC = "fuzz-target"
# The work one case may ask for: a valid partition count above this is brought down to it. Creating
# 10,000 partitions takes seconds, more on a busy machine; tests/core/test_catalog_and_bad_input.py
# creates the largest topic on its own, and `make bench` times it.
MAX_FUZZ_PARTITIONS = 64


def _bounded(body: Any) -> Any:
    """The body with a valid but large partition count brought down (an invalid one is kept: it is refused
    before any work)."""
    if isinstance(body, dict) and isinstance(body.get("partitions"), int) and not isinstance(body["partitions"], bool):
        if MAX_FUZZ_PARTITIONS < body["partitions"] <= MAX_PARTITIONS:
            return {**body, "partitions": MAX_FUZZ_PARTITIONS}
    return body


def _raw(value: Any) -> bytes:
    """Whatever the generator made (negative cases make any type), as body bytes."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return json.dumps(value).encode()


@schemathesis.serializer("application/x-ndjson", "application/vnd.apache.arrow.stream")
def _as_bytes(ctx: Any, value: Any) -> bytes:
    return _raw(value)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    server = ThreadServer(make_settings(tmp_path_factory.mktemp("fuzz"), max_poll_timeout_ms=20,
                                       request_timeout_ms=5000, max_request_bytes=1 << 20)).start()
    with server.client() as c:
        assert c.post("/v1/topics", json={"name": FUZZ_TOPIC, "partitions": 3}).status_code == 201
    yield server
    server.stop()


def test_fuzz_every_operation(fuzz_server: ThreadServer) -> None:
    schema = schemathesis.openapi.from_url(fuzz_server.url + "/openapi.json")
    cases = 0
    failures: list[str] = []
    with fuzz_server.client() as probe:
        for found in schema.get_all_operations():
            operation = found.ok()
            is_produce = operation.method.upper() == "POST" and operation.path == "/v1/topics/{topic}/records"
            modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]

            for mode in modes:
                @settings(max_examples=EXAMPLES_PER_OPERATION // len(modes), phases=[Phase.explicit, Phase.generate],
                          database=None, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
                @given(case=operation.as_strategy(generation_mode=mode))
                def run(case: Any) -> None:
                    nonlocal cases
                    if is_produce:
                        case.path_parameters = {**(case.path_parameters or {}), "topic": FUZZ_TOPIC}
                        fuzz_server.settle()  # an earlier acks=0 case may still be landing
                        before = end_offsets(probe, FUZZ_TOPIC)
                    case.body = _bounded(case.body)
                    response = case.call(base_url=fuzz_server.url, timeout=STUCK_S)
                    cases += 1
                    status = response.status_code
                    if status >= 500 and status != 503:
                        failures.append(f"{operation.method} {operation.path} -> {status}: {response.text[:300]}")
                    if is_produce and status >= 400:
                        fuzz_server.settle()  # a rejected request that slipped into a flush would land now
                        after = end_offsets(probe, FUZZ_TOPIC)
                        if after != before:
                            failures.append(f"rejected produce ({status}: {response.text[:200]}) wrote records: "
                                            f"{before} -> {after}; query {case.query}, headers {case.headers}")

                try:
                    run()
                except Unsatisfiable:
                    assert mode == GenerationMode.NEGATIVE  # nothing to break in an operation without inputs
        assert probe.get("/healthz").status_code == 200
        assert probe.get("/readyz").status_code == 200
    assert not failures, "\n".join(failures[:20])
    assert cases >= MIN_CASES, f"only {cases} generated cases ran"
    fuzz_server.settle()
    assert_root_intact(fuzz_server.settings.root)


def test_openapi_document_has_examples(fuzz_server: ThreadServer) -> None:
    document = httpx.get(fuzz_server.url + "/openapi.json", timeout=STUCK_S).json()
    schemas = document["components"]["schemas"]
    for name in ("ProduceRequest", "CreateTopic", "JoinGroup", "CommitOffsets"):
        assert schemas[name].get("examples"), name
