"""`__consumer_offsets` over the Kafka protocol: listed, fetched and looked up, never written.

The topic is generated from the committed-offsets table (`platform/groups/offsets_topic.py`), read by
any node (`OffsetsTopicLog`, one per broker). Metadata lists it as internal with Kafka's 50 partitions
(a client with `exclude.internal.topics=false` subscribes to it), Fetch and ListOffsets read it, and
OffsetCommit accepts a consumer's position on it. A produce to it is refused with
INVALID_TOPIC_EXCEPTION, as Kafka refuses appends to an internal topic, and logged.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeAlias

import pyarrow as pa
from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse
from kafka.protocol.metadata import MetadataResponse

from lakelog.kafka_api import nodes
from lakelog.kafka_api.batches import encode_fetch, fetch_magic
from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import CODES, error_code
from lakelog.kafka_api.threads import blocking
from lakelog.platform.broker.node import Broker
from lakelog.platform.errors import InvalidTopic
from lakelog.platform.groups.offsets_topic import OFFSETS_TOPIC, PARTITIONS, SLOTS_PER_MS
from lakelog.platform.groups.offsets_topic_log import BATCH_SCHEMA, REFRESH_S, OffsetsTopicLog

if TYPE_CHECKING:  # fetch.py reads this module's partitions
    from lakelog.kafka_api.handlers.fetch import Wanted

log = logging.getLogger(__name__)

Topic: TypeAlias = MetadataResponse.MetadataResponseTopic
Partition: TypeAlias = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition
PartitionData: TypeAlias = FetchResponse.FetchableTopicResponse.PartitionData
OffsetsPartition: TypeAlias = ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
LATEST = -1
MAX_DELTA = (1 << 31) - 1  # a v2 batch's offset deltas are int32: records further apart go in another batch

_logs: weakref.WeakKeyDictionary[Broker, OffsetsTopicLog] = weakref.WeakKeyDictionary()
_opening = threading.Lock()


def offsets_log(broker: Broker) -> OffsetsTopicLog:
    """The broker's reader of the topic (its first use opens the offsets table: call it off the loop)."""
    with _opening:
        found = _logs.get(broker)
        if found is None:
            found = _logs[broker] = OffsetsTopicLog(broker.storage)
        return found


def is_offsets_topic(topic: str) -> bool:
    return topic == OFFSETS_TOPIC


# ---- Metadata ----------------------------------------------------------------------------------------


def listed(context: Context, known: Mapping[str, object]) -> list[str]:
    """The internal topic, when Metadata lists all topics and the caller may describe it (once: a topic of
    that name made over HTTP is listed already, and over Kafka it is the generated one that is read)."""
    if OFFSETS_TOPIC in known or not context.allowed("describe", "topic", OFFSETS_TOPIC):
        return []
    return [OFFSETS_TOPIC]


def metadata_topic(context: Context) -> Topic:
    """Kafka's 50 partitions, all led by the node leading the name (any node can serve them)."""
    leader = nodes.leader(context, OFFSETS_TOPIC).broker_id
    partitions = [Partition(error_code=0, partition_index=p, leader_id=leader, leader_epoch=0, replica_nodes=[leader],
                            isr_nodes=[leader], offline_replicas=[]) for p in range(PARTITIONS)]
    return Topic(error_code=0, name=OFFSETS_TOPIC, is_internal=True, partitions=partitions)


# ---- Produce -----------------------------------------------------------------------------------------


def produce_refused(context: Context) -> InvalidTopic:
    log.warning("refused a produce to %s from %s (client id %r): the topic is generated from the committed "
                "offsets and read-only", OFFSETS_TOPIC, context.peer, context.client_id)
    return InvalidTopic(f"cannot append to internal topic {OFFSETS_TOPIC}: it is generated from the groups' "
                        "committed offsets (commit with OffsetCommit)")


# ---- Fetch and ListOffsets ---------------------------------------------------------------------------


async def fetch_partitions(context: Context, wanted: list[Wanted], wait_ms: int,
                           version: int) -> dict[tuple[str, int], PartitionData]:
    """The fetched partitions of the topic, waiting up to `wait_ms` for a record
    when none is there yet (0 when the same fetch also waits on other topics)."""
    if not wanted:
        return {}
    return await blocking(_read, context.services.broker, wanted, wait_ms, fetch_magic(version))


def _read(broker: Broker, wanted: list[Wanted], wait_ms: int,
          magic: int) -> dict[tuple[str, int], PartitionData]:
    deadline = time.monotonic() + max(wait_ms, 0) / 1000
    try:
        topic_log = offsets_log(broker)
    except Exception as exc:  # the offsets table could not be opened
        return {(w.topic, w.partition): _failed(w.partition, error_code(exc)) for w in wanted}
    while True:
        found = {(w.topic, w.partition): _partition(topic_log, w.partition, w.offset, w.max_bytes, magic)
                 for w in wanted}
        if any(p.records for p in found.values()) or time.monotonic() >= deadline:
            return found
        time.sleep(min(REFRESH_S, max(deadline - time.monotonic(), 0)))


def _partition(topic_log: OffsetsTopicLog, partition: int, offset: int, max_bytes: int, magic: int) -> PartitionData:
    if not 0 <= partition < PARTITIONS:
        return _failed(partition, CODES["UNKNOWN_TOPIC_OR_PARTITION"])
    try:
        return _records(topic_log, partition, offset, max_bytes, magic)
    except Exception as exc:  # the offsets table could not be read: this partition's error, not the fetch's
        return _failed(partition, error_code(exc))


def _failed(partition: int, code: int) -> PartitionData:
    return PartitionData(partition_index=partition, error_code=code, high_watermark=-1, last_stable_offset=-1,
                         log_start_offset=-1, aborted_transactions=[], preferred_read_replica=-1, records=b"")


def _records(topic_log: OffsetsTopicLog, partition: int, offset: int, max_bytes: int, magic: int) -> PartitionData:
    end = topic_log.end_offset(partition)
    # An offset past the end waits for the next commit: the end can move back when a group's offsets are
    # deleted, and a consumer positioned there must not be reset past the commits still to come.
    rows = topic_log.read(partition, offset, max_bytes) if offset < end else BATCH_SCHEMA.empty_table()
    return PartitionData(partition_index=partition, error_code=0, high_watermark=end, last_stable_offset=end,
                         log_start_offset=0, aborted_transactions=[], preferred_read_replica=-1,
                         records=encode_batches(rows, magic))


def encode_batches(rows: pa.Table, magic: int = 2) -> bytes:
    """The records as batches whose offset deltas fit (offsets here are commit times, far apart)."""
    out, start = [], 0
    offsets = rows.column("offset").to_pylist()
    for i in range(1, len(offsets) + 1):
        if i == len(offsets) or offsets[i] - offsets[start] > MAX_DELTA:
            out.append(encode_fetch(rows.slice(start, i - start), 0, magic))
            start = i
    return b"".join(out)


async def list_offset(context: Context, partition: int, timestamp: int, version: int) -> OffsetsPartition:
    if not 0 <= partition < PARTITIONS:
        return OffsetsPartition(partition_index=partition, error_code=CODES["UNKNOWN_TOPIC_OR_PARTITION"],
                                timestamp=-1, offset=-1, leader_epoch=-1)
    try:
        offset = await blocking(_offset_for, context.services.broker, partition, timestamp)
    except Exception as exc:
        return OffsetsPartition(partition_index=partition, error_code=error_code(exc), timestamp=-1, offset=-1,
                                leader_epoch=-1)
    found_at = -1 if offset is None or timestamp < 0 else offset // SLOTS_PER_MS  # the record's commit time
    if version == 0:
        return OffsetsPartition(partition_index=partition, error_code=0,
                                old_style_offsets=[] if offset is None else [offset])
    return OffsetsPartition(partition_index=partition, error_code=0, timestamp=found_at,
                            offset=-1 if offset is None else offset, leader_epoch=0)


def _offset_for(broker: Broker, partition: int, timestamp: int) -> int | None:
    """ListOffsets: the end (-1), the start (-2, and -4 "earliest local": all of it is), or the first record
    committed at or after a time (None: none was)."""
    if timestamp == LATEST:
        return offsets_log(broker).end_offset(partition)
    if timestamp < 0:
        return 0
    return offsets_log(broker).offset_for_time(partition, timestamp)
