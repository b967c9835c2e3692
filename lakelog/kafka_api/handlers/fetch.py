"""Fetch and ListOffsets: partitions read as v2 record batches, offsets looked up by time.

A Fetch waits (up to max_wait_ms) until min_bytes are there across its partitions, in one worker
thread, woken by commits as HTTP long polls are. From v7 a Fetch may open or continue a fetch session
(KIP-227, `fetch_sessions.py`): an incremental one reads every partition of its session and answers only
those with news. A partition at its log end is answered from the node's memory (its log end offset and
high watermark), so polling idle partitions reads no table per partition.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from kafka.protocol.consumer import FetchResponse, ListOffsetsRequest, ListOffsetsResponse

from lakelog.kafka_api.batches import COMPRESSION, ZSTD, encode_fetch, fetch_magic
from lakelog.kafka_api.context import Context, Services
from lakelog.kafka_api.errors import CODES, error_code
from lakelog.kafka_api.fetch_sessions import FIRST_SESSION_VERSION, Answer, Key, Kind, sessionless
from lakelog.kafka_api.handlers import offsets_topic, transactions
from lakelog.kafka_api.protocol import Call
from lakelog.kafka_api.threads import blocking
from lakelog.platform.broker.node import Broker
from lakelog.platform.errors import InvalidRequest, LakelogError
from lakelog.platform.records import FetchResult, record_sizes

TopicData: TypeAlias = FetchResponse.FetchableTopicResponse
PartitionData: TypeAlias = FetchResponse.FetchableTopicResponse.PartitionData
OffsetsTopic: TypeAlias = ListOffsetsResponse.ListOffsetsTopicResponse
OffsetsPartition: TypeAlias = ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
OffsetWanted: TypeAlias = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
MAX_RECORDS = 1_000_000  # the byte limits govern; this only bounds one read
RECORD_OVERHEAD = 16  # a v2 record's attributes, varint deltas and lengths, about (a batch adds 61 bytes)
LATEST, EARLIEST, EARLIEST_LOCAL = -1, -2, -4  # -4 (v8+, KIP-405): all of lakelog's log is "local"
FIRST_ZSTD_FETCH = 10  # KIP-110: older consumers cannot read zstd


@dataclass(frozen=True)
class Wanted:
    topic: str
    partition: int
    offset: int
    max_bytes: int


async def fetch(context: Context, call: Call) -> FetchResponse:
    request = call.body
    requested = {(t.topic, p.partition): (p.fetch_offset, p.partition_max_bytes)
                 for t in request.topics for p in t.partitions}
    if call.version >= FIRST_SESSION_VERSION:
        forgotten = [(t.topic, p) for t in request.forgotten_topics_data for p in t.partitions]
        plan = context.fetch_sessions.plan(request.session_id, request.session_epoch, requested, forgotten)
    else:
        plan = sessionless(requested)
    answers = await _answer(context, call, plan.wanted) if plan.kind is not Kind.ERROR else []
    outcome = context.fetch_sessions.finish(plan, [(key, _summary(data)) for key, data in answers])
    listed = set(outcome.listed)
    responses: dict[str, list[PartitionData]] = {}
    for key, data in answers:
        if key in listed:
            responses.setdefault(key[0], []).append(data)
    return FetchResponse(throttle_time_ms=0, error_code=outcome.error_code, session_id=outcome.session_id,
                         responses=[TopicData(topic=name, partitions=parts) for name, parts in responses.items()])


async def _answer(context: Context, call: Call, plan: list[tuple[Key, int, int]]) -> list[tuple[Key, PartitionData]]:
    """Each planned partition read (or refused) and answered, in the plan's order."""
    request = call.body
    allowed = {topic: context.allowed("read", "topic", topic) for topic in {key[0] for key, _, _ in plan}}
    wanted = [Wanted(topic, partition, offset, size) for (topic, partition), offset, size in plan if allowed[topic]]
    services = context.services
    wait_ms = min(request.max_wait_ms, services.settings.max_poll_timeout_ms)
    internal = [w for w in wanted if offsets_topic.is_offsets_topic(w.topic)]  # generated, not in a table
    wanted = [w for w in wanted if not offsets_topic.is_offsets_topic(w.topic)]
    found = await blocking(read_partitions, services.broker, wanted, request.max_bytes or 2**31 - 1,
                           max(request.min_bytes, 1), wait_ms)
    found.update(await offsets_topic.fetch_partitions(context, internal, 0 if wanted else wait_ms, call.version))
    read_committed = call.version >= 4 and request.isolation_level == 1
    magic = fetch_magic(call.version)  # v0-v3 read message sets of magic 0 or 1
    codecs: dict[str, int] = {}
    answers = []
    for key, _, _ in plan:
        topic, partition = key
        if topic not in codecs:
            codecs[topic] = _codec(services, topic, call.version)
        refused = None if allowed[topic] else CODES["TOPIC_AUTHORIZATION_FAILED"]
        answers.append((key, _partition(partition, found.get(key), refused, codecs[topic], magic, read_committed)))
    return answers


def _codec(services: Services, topic: str, version: int) -> int:
    compression = _compression(services, topic)
    if compression == ZSTD and version < FIRST_ZSTD_FETCH:
        return 0  # lakelog compresses at fetch time: it answers what the consumer can read
    return compression


def _summary(data: PartitionData) -> Answer:
    """What a session compares of a partition's answer."""
    return Answer(bool(data.records), data.error_code, data.high_watermark, data.log_start_offset,
                  data.last_stable_offset)


def _compression(services: Services, topic: str) -> int:
    """The codec of the topic's `compression.type` (the topic is open: the fetch read it)."""
    try:
        return COMPRESSION[services.broker.topic(topic).config.compression_type]
    except LakelogError:
        return 0


def _partition(index: int, result: FetchResult | LakelogError | PartitionData | None, refused: int | None,
               compression: int, magic: int, read_committed: bool = False) -> PartitionData:
    # The class itself, not its alias: kafka-python ships no py.typed, so to mypy the alias names Any.
    if isinstance(result, FetchResponse.FetchableTopicResponse.PartitionData):  # __consumer_offsets: answered whole
        return result
    if isinstance(result, FetchResult):
        stable = result.last_stable_offset if result.last_stable_offset >= 0 else result.high_watermark
        records = encode_fetch(result.records, compression, magic, topic=result.topic)
        listed = []
        if result.skip_to is not None and magic == 2:  # offsets without records: their last marker moves it on
            marker = result.marker
            records = transactions.marker_batch(marker, result.skip_to - 1)
            if read_committed and marker is not None and not marker.commit:
                listed = [PartitionData.AbortedTransaction(producer_id=marker.producer_id, first_offset=marker.offset)]
        return PartitionData(partition_index=index, error_code=0, high_watermark=result.high_watermark,
                             last_stable_offset=stable, log_start_offset=result.log_start_offset,
                             aborted_transactions=listed, preferred_read_replica=-1, records=records)
    code = refused if refused is not None else error_code(result) if result is not None else CODES[
        "UNKNOWN_TOPIC_OR_PARTITION"]
    return PartitionData(partition_index=index, error_code=code, high_watermark=-1, last_stable_offset=-1,
                         log_start_offset=-1, aborted_transactions=[], preferred_read_replica=-1, records=b"")


def read_partitions(broker: Broker, wanted: list[Wanted], max_bytes: int, min_bytes: int,
                    max_wait_ms: int) -> dict[tuple[str, int], FetchResult | LakelogError]:
    """Each partition from its offset, within its own and the request's byte limits: the first partition
    with records always gets at least one, as in Kafka, and a later one only what fits in what is left of
    `max_bytes`; waits for min_bytes up to max_wait_ms (a partition moved past offsets without records
    answers at once)."""
    deadline = time.monotonic() + max(max_wait_ms, 0) / 1000
    wait_s = broker.settings.refresh_interval_ms / 1000
    while True:
        found: dict[tuple[str, int], FetchResult | LakelogError] = {}
        total = 0
        for want in wanted:
            budget = min(want.max_bytes, max_bytes - total)
            try:
                result = broker.fetch(want.topic, want.partition, want.offset, MAX_RECORDS, max(budget, 1))
            except LakelogError as exc:
                found[(want.topic, want.partition)] = exc
                continue
            if total:  # not the first partition with records: nothing past the request's limit
                result = replace(result, records=within(result.records, budget))
            found[(want.topic, want.partition)] = result
            total += _bytes(result.records)
        remaining = deadline - time.monotonic()
        failed = any(isinstance(r, LakelogError) for r in found.values())
        moved = any(isinstance(r, FetchResult) and r.skip_to is not None for r in found.values())
        if total >= min_bytes or moved or remaining <= 0 or failed or not wanted:
            return found
        broker.wait_for_commit(min(remaining, wait_s))


def within(records: pa.Table, budget: int) -> pa.Table:
    """The records from the first whose encoded size (estimated: `_bytes`) fits in `budget`, none when
    the first does not."""
    if not records.num_rows:
        return records
    sizes = pc.add(record_sizes(records), RECORD_OVERHEAD).to_numpy(zero_copy_only=False)
    return records.slice(0, int(np.searchsorted(np.cumsum(sizes), budget, side="right")))


def _bytes(table: pa.Table) -> int:
    """A record batch's size on the wire, estimated: keys, values and headers, and each record's framing."""
    return int(pc.sum(record_sizes(table)).as_py() or 0) + RECORD_OVERHEAD * table.num_rows if table.num_rows else 0


async def list_offsets(context: Context, call: Call) -> ListOffsetsResponse:
    request = call.body
    topics = []
    for topic in request.topics:
        allowed = context.allowed("describe", "topic", topic.name)
        partitions = [await _offset(context, topic.name, p, allowed, call.version,
                                    request.isolation_level if call.version >= 2 else 0) for p in topic.partitions]
        topics.append(OffsetsTopic(name=topic.name, partitions=partitions))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


async def _offset(context: Context, topic: str, wanted: OffsetWanted, allowed: bool,
                  version: int, isolation_level: int = 0) -> OffsetsPartition:
    partition, timestamp = wanted.partition_index, wanted.timestamp
    if not allowed:
        return _offset_error(partition, CODES["TOPIC_AUTHORIZATION_FAILED"])
    if offsets_topic.is_offsets_topic(topic):
        return await offsets_topic.list_offset(context, partition, timestamp, version)
    try:
        if version == 0:
            offsets = await blocking(old_style_offsets, context.services.broker, topic, partition, timestamp,
                                     wanted.max_num_offsets)
            return OffsetsPartition(partition_index=partition, error_code=0, old_style_offsets=offsets)
        offset, found_at = await blocking(offset_for, context.services.broker, topic, partition, timestamp)
        if timestamp == LATEST and version >= 2 and isolation_level == 1:  # read_committed: the last stable offset
            offset = await blocking(context.services.broker.last_stable_offset, topic, partition)
    except LakelogError as exc:
        return _offset_error(partition, error_code(exc))
    return OffsetsPartition(partition_index=partition, error_code=0, timestamp=found_at, offset=offset,
                            leader_epoch=0)


def _offset_error(partition: int, code: int) -> OffsetsPartition:
    return OffsetsPartition(partition_index=partition, error_code=code, timestamp=-1, offset=-1, leader_epoch=-1)


def offset_for(broker: Broker, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
    """(offset, its record's timestamp) for Kafka's ListOffsets: latest, earliest, or the first record at or
    after `timestamp` ((-1, -1) when there is none, as Kafka answers)."""
    if timestamp == LATEST:
        return broker.list_offset(topic, partition, "latest"), -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return broker.list_offset(topic, partition, "earliest"), -1
    if timestamp < 0:
        raise InvalidRequest(f"ListOffsets timestamp {timestamp} is not served (latest -1, earliest -2, or a time)")
    offset = broker.list_offset(topic, partition, timestamp)
    if offset >= broker.list_offset(topic, partition, "latest"):
        return -1, -1
    record = broker.fetch(topic, partition, offset, 1).records
    if record.num_rows == 0:
        return -1, -1
    return int(record.column("offset")[0].as_py()), int(record.column("timestamp").cast(pa.int64())[0].as_py())


def old_style_offsets(broker: Broker, topic: str, partition: int, timestamp: int, max_offsets: int) -> list[int]:
    """ListOffsets v0's list. Kafka lists the base offsets of the segments written before `timestamp`,
    newest first; lakelog has no such segments and answers the one offset v1 finds (latest, earliest, or
    the first record at or after the time, else the log end offset, as Kafka's list starts there too),
    in a list of at most `max_offsets`."""
    if timestamp < 0 and timestamp not in (LATEST, EARLIEST):
        raise InvalidRequest(f"ListOffsets v0 timestamp {timestamp} is not served (latest -1, earliest -2, or a time)")
    spec: str | int = "latest" if timestamp == LATEST else "earliest" if timestamp == EARLIEST else timestamp
    return [broker.list_offset(topic, partition, spec)][:max(max_offsets, 0)]
