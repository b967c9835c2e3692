"""Produce (JSON, NDJSON, Arrow IPC) and fetch by partition and offset (long polling)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from dataclasses import asdict, replace
from typing import Annotated, Literal

import orjson
import pyarrow as pa
from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.responses import Response

from lakelog.ingest_api import codec
from lakelog.ingest_api.answers import answered
from lakelog.ingest_api.auth import Principal, Svc, bearer, bearer_of
from lakelog.ingest_api.dependencies import Services, blocking, current_services, read_body
from lakelog.ingest_api.errors import SchemaViolation, UnsupportedMediaType
from lakelog.ingest_api.models import FetchResponse, OffsetAnswer, ProduceResponse
from lakelog.platform.broker import auto_create
from lakelog.platform.catalog.catalog import TopicMeta
from lakelog.platform.errors import UnknownTopicOrPartition
from lakelog.platform.records import FetchResult, ProducerBatch, ProduceResult
from lakelog.platform.typed import fetch as typed_fetch
from lakelog.platform.typed import produce as typed_produce
from lakelog.platform.typed.column import TYPED_COLUMN
from lakelog.schemas import TOPIC_SCHEMA

router = APIRouter(prefix="/v1/topics", tags=["records"])
PARSE_INLINE_BYTES = 64 * 1024
TopicName = Annotated[str, Path(min_length=1, max_length=249)]
PartitionId = Annotated[int, Path(ge=0, le=2**31 - 1)]
FormatQ = Literal["json", "string", "base64"]

PRODUCE_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/ProduceRequest"}},
            codec.NDJSON: {"schema": {"type": "string"},
                           "example": '{"key": "k1", "value": "v1"}\n{"key": "k2", "value": "v2"}\n'},
            codec.ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}},
        },
    }
}


def json_response(payload: object, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def _query_doc(name: str, schema: dict, description: str) -> dict:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


PRODUCE_PARAMETERS = [
    _query_doc("acks", {"type": "string", "enum": ["0", "1", "all", "-1"], "default": "1"},
               "0: answered once accepted; 1 and all: after the commit"),
    _query_doc("timeout_ms", {"type": "integer", "minimum": 1, "maximum": 300_000}, "Produce deadline"),
    _query_doc("key_format", {"type": "string", "enum": list(codec.FORMATS), "default": "string"},
               "NDJSON bodies: how keys are written"),
    _query_doc("value_format", {"type": "string", "enum": list(codec.FORMATS), "default": "string"},
               "NDJSON bodies: how values are written (json to a typed topic: converted with the subject's "
               "latest schema into Confluent's wire format)"),
    _query_doc("producer_id", {"type": "integer", "minimum": 0, "maximum": codec.IDEMPOTENCY_BASE - 1},
               "Idempotent producer id"),
    _query_doc("producer_epoch", {"type": "integer", "minimum": 0, "maximum": 32767}, "Idempotent producer epoch"),
    _query_doc("sequence", {"type": "integer", "minimum": 0, "maximum": codec.MAX_INT32},
               "Sequence of the first record"),
    {"name": "Idempotency-Key", "in": "header", "required": False,
     "schema": {"type": "string", "minLength": 1, "maxLength": 256},
     "description": "A retried request with the same key is answered with the first answer's offsets"},
]
QUERY_NAMES = frozenset(p["name"] for p in PRODUCE_PARAMETERS if p["in"] == "query")


@router.post(
    "/{topic}/records",
    response_model=ProduceResponse,
    openapi_extra={**PRODUCE_BODY, "parameters": PRODUCE_PARAMETERS},
    summary="Produce records; answers one {partition, offset, timestamp} per record, in order",
    responses={404: {"description": "Unknown topic or partition"}, 413: {"description": "Record or body too large"}},
    dependencies=[Depends(bearer)],
)
async def produce(topic: TopicName, request: Request) -> Response:
    # Served by the fast path (fast_path.py) but for paths it does not take; this route declares it.
    services = current_services(request)
    payload = await produce_call(services, topic, request.query_params, request.headers,
                                 lambda: read_body(request, services))
    return json_response(payload)


async def produce_call(services: Services, topic: str, query: Mapping[str, str], headers: Mapping[str, str],
                       read: Callable[[], Awaitable[bytes]]) -> dict[str, object]:
    """One produce request: its answer's payload. `headers` by lower-case name; `read()` reads the body
    (its bytes reserved, as `read_body`) once the request passed its checks."""
    # The hot path: query and headers are read directly (no per-parameter dependency solving).
    started = time.perf_counter()
    principal = services.authorizer.authenticate(bearer_of(headers.get("authorization")))
    services.authorizer.check(principal, "write", "topic", topic)
    acks, timeout_ms, query_producer = produce_query(query) if query else ("1", None, {})
    body = await read()
    try:
        content_type = headers.get("content-type", "application/json")
        key_format, value_format = query.get("key_format", "string"), query.get("value_format", "string")
        # A large body takes milliseconds to parse: on a worker thread, so the event loop keeps serving.
        if len(body) <= PARSE_INLINE_BYTES:
            parsed = parse_body(content_type, body, key_format, value_format)
        else:
            parsed = await blocking(parse_body, content_type, body, key_format, value_format)
        if query_producer and parsed.producer:
            raise SchemaViolation("give the producer fields either in the query or in the body, not both")
        producer = codec.producer_batch(query_producer or parsed.producer, headers.get("idempotency-key"))
        result = await produce_and_wait(services, topic, parsed, acks, timeout_ms, producer, principal)
    finally:
        services.release(len(body))
    services.metrics.produced(topic, len(result), len(body), acks, time.perf_counter() - started)
    return produce_payload(result)


def produce_query(query: Mapping[str, str]) -> tuple[str, int | None, dict[str, int]]:
    """acks, timeout_ms and the producer fields of a produce request's query, checked."""
    unknown = query.keys() - QUERY_NAMES
    if unknown:
        raise SchemaViolation(f"unknown query parameter(s) {sorted(unknown)}")
    acks = query.get("acks", "1")
    if acks not in ("0", "1", "all", "-1"):
        raise SchemaViolation(f"acks must be 0, 1 or all, got {acks!r}")
    timeout_ms = query_int(query, "timeout_ms", 1, 300_000)
    query_producer = {name: value for name, upper in (("producer_id", codec.IDEMPOTENCY_BASE - 1),
                                                      ("producer_epoch", 32767), ("sequence", codec.MAX_INT32))
                      if (value := query_int(query, name, 0, upper)) is not None}
    return acks, timeout_ms, query_producer


def query_int(query: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    raw = query.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise SchemaViolation(f"{name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise SchemaViolation(f"{name} must be between {low} and {high}, got {value}")
    return value


def parse_body(content_type: str, body: bytes, key_format: str, value_format: str) -> codec.ParsedProduce:
    media = content_type.split(";", 1)[0].strip().lower()
    if media in ("application/json", ""):
        return codec.parse_json_body(body)
    if media in (codec.NDJSON, "application/jsonl", "application/ndjson"):
        return codec.parse_ndjson_body(body, key_format, value_format)
    if media in (codec.ARROW_STREAM, "application/vnd.apache.arrow.file"):
        return codec.parse_arrow_body(body)
    raise UnsupportedMediaType(
        f"unsupported content type {media!r}: use application/json, {codec.NDJSON} or {codec.ARROW_STREAM}")


async def produce_and_wait(services: Services, topic: str, parsed: codec.ParsedProduce, acks: str,
                           timeout_ms: int | None, producer: ProducerBatch | None, principal: str) -> ProduceResult:
    if (await opened(services, topic, parsed, principal)).config.validates_schemas:
        future = await blocking(produce_typed, services, topic, parsed, acks, timeout_ms, producer)
    else:
        future = services.broker.produce_async(topic, parsed.records, acks, timeout_ms, producer)
    # The core owns the deadline: the writer answers this future by then, with REQUEST_TIMED_OUT at worst.
    # The flush thread owns the future: a client that goes away cancels only the wait (answers.py).
    result: ProduceResult = await answered(future)
    return result


async def opened(services: Services, topic: str, parsed: codec.ParsedProduce, principal: str) -> TopicMeta:
    """The topic, its table open: the first use opens it (storage I/O, off the event loop). `open_topics` is a
    hint: a topic deleted since (by another node) is looked up again, and created if auto-creation is on."""
    if topic in services.open_topics:
        try:
            return services.broker.topic(topic)
        except UnknownTopicOrPartition:
            services.open_topics.discard(topic)
    meta = await blocking(open_or_create, services, topic, parsed, principal)
    services.open_topics.add(topic)
    return meta


def open_or_create(services: Services, topic: str, parsed: codec.ParsedProduce, principal: str) -> TopicMeta:
    """The topic's table opened (blocking); a missing topic created first when auto.create.topics.enable is
    on, as a Kafka client's Metadata creates it (the same setting and the same CREATE right)."""
    settings = services.settings
    try:
        return services.broker.topic(topic)
    except UnknownTopicOrPartition:
        if not settings.auto_create_topics_enable or not auto_create.creatable(topic):
            raise
    auto_create.create_on_first_use(services.broker, services.authorizer, principal, topic, settings.num_partitions,
                                    settings.default_replication_factor,
                                    least_partitions=auto_create.highest_partition(parsed.records) + 1)
    return services.broker.topic(topic)


def produce_typed(services: Services, topic: str, parsed: codec.ParsedProduce, acks: str, timeout_ms: int | None,
                  producer: ProducerBatch | None) -> Future:
    """A typed topic's call, checked (embedded JSON converted first) before it is queued: blocking."""
    screened = typed_produce.screen(services.broker, services.record_validator(), topic, parsed.records, producer,
                                    json_keys=parsed.key_format == "json", json_values=parsed.value_format == "json")
    return typed_produce.submit(services.broker, screened, acks, timeout_ms, producer)


def produce_payload(result: ProduceResult) -> dict[str, object]:
    payload: dict[str, object] = {"offsets": offsets_payload(result)}
    if isinstance(result, typed_produce.TypedProduceResult) and result.dead_letters:
        payload["dead_letters"] = [asdict(letter) for letter in result.dead_letters]
    return payload


def offsets_payload(result: ProduceResult) -> list[dict[str, int]]:
    return [{"partition": p, "offset": o, "timestamp": t} for p, o, t in
            zip(result.partitions.tolist(), result.offsets.tolist(), result.timestamps_ms.tolist())]


@router.get(
    "/{topic}/partitions/{partition}/records",
    response_model=FetchResponse,
    summary="Fetch records from an offset (long poll with timeout_ms); format=arrow answers an Arrow IPC stream",
    responses={200: {"content": {codec.ARROW_STREAM: {}}}},
)
async def fetch(
    topic: TopicName,
    partition: PartitionId,
    services: Svc,
    principal: Principal,
    offset: Annotated[int, Query(ge=0, le=2**63 - 1)],
    max_records: Annotated[int, Query(ge=1, le=100_000)] = 500,
    max_bytes: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    timeout_ms: Annotated[int, Query(ge=0, le=300_000)] = 0,
    min_bytes: Annotated[int, Query(ge=1, le=2**31 - 1, description="wait (up to timeout_ms) for this many bytes")] = 1,
    key_format: FormatQ = "string",
    value_format: FormatQ = "string",
    format: Literal["json", "arrow"] = "json",
    isolation_level: Annotated[Literal["read_committed", "read_uncommitted"], Query(
        alias="isolation.level", description="Kafka's: both read the same records, committed ones (open "
                                             "transactions' records are not in the table)")] = "read_committed",
    value_typed: Annotated[bool, Query(description=(
        "Typed topics (confluent.value.schema.validation=true): each record also carries `value_typed`, its "
        "value's fields decoded with the registered schema (bytes base64, timestamps ISO 8601 UTC, decimals "
        "strings; null when the value does not decode); format=arrow adds the `value_typed` struct column. "
        "422 on a topic that is not typed"))] = False,
) -> Response:
    started = time.perf_counter()
    services.authorizer.check(principal, "read", "topic", topic)
    if value_typed:  # refused before any long poll
        await blocking(lambda: typed_fetch.require_typed(services.broker.topic_log(topic)))
    wait = min(timeout_ms, services.settings.max_poll_timeout_ms)
    result: FetchResult = await blocking(services.broker.fetch, topic, partition, offset, max_records, max_bytes, wait,
                                         min_bytes=min_bytes)
    typed = None
    if value_typed:
        typed = await blocking(lambda: typed_fetch.typed_values(services.broker.topic_log(topic), result.records))
    record_fetch(services, [result], "fetch", started)
    extra = {"high_watermark": result.high_watermark, "last_stable_offset": result.last_stable_offset,
             "log_start_offset": result.log_start_offset,
             "next_offset": result.next_offset if result.next_offset is not None else offset}
    return records_response([result], key_format, value_format, format, extra, typed)


def record_fetch(services: Services, results: list[FetchResult], kind: str, started: float) -> None:
    metrics = services.metrics
    for result in results:
        if result.records.num_rows:
            metrics.fetch_records.labels(result.topic).inc(result.records.num_rows)
            metrics.fetch_bytes.labels(result.topic).inc(result.records.nbytes)
    metrics.fetch_latency.labels(kind).observe(time.perf_counter() - started)


def records_response(results: list[FetchResult], key_format: str, value_format: str, fmt: str,
                     extra: Mapping[str, object], typed: pa.StructArray | None = None) -> Response:
    """`typed`: one partition's fetch asked with value_typed, its records' fields."""
    if fmt == "arrow":
        headers = {f"X-Lakelog-{k.replace('_', '-').title()}": str(v) for k, v in extra.items() if v is not None}
        if typed is not None:
            (result,) = results
            table = result.records.append_column(pa.field(TYPED_COLUMN, typed.type), typed)
            return Response(codec.arrow_stream([replace(result, records=table)], table.schema),
                            media_type=codec.ARROW_STREAM, headers=headers)
        return Response(codec.arrow_stream(results, TOPIC_SCHEMA), media_type=codec.ARROW_STREAM, headers=headers)
    records = codec.render_records(results, key_format, value_format)
    if typed is not None:
        for record, fields in zip(records, typed_fetch.json_rows(typed)):
            record[TYPED_COLUMN] = fields
    return json_response({"records": records, **extra})


@router.get("/{topic}/partitions/{partition}/offsets", response_model=OffsetAnswer,
            summary="The earliest or latest offset, or the earliest offset at or after a timestamp (ms)")
async def list_offset(
    topic: TopicName,
    partition: PartitionId,
    services: Svc,
    principal: Principal,
    spec: Annotated[str, Query(pattern=r"^(earliest|latest|[0-9]{1,18})$",
                               description="earliest, latest or a timestamp in ms")] = "latest",
) -> OffsetAnswer:
    services.authorizer.check(principal, "describe", "topic", topic)
    value = spec if spec in ("earliest", "latest") else int(spec)
    offset = await blocking(services.broker.list_offset, topic, partition, value)
    return OffsetAnswer(topic=topic, partition=partition, spec=spec, offset=offset)
