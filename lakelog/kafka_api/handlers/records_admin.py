"""A topic's records as an operator sees them: DeleteRecords, DescribeLogDirs, DescribeProducers.

- DeleteRecords moves partitions' log start up to an offset (-1: the high watermark), by removing and
  cutting files as retention does (`compaction/delete_records.py`); it answers the new low watermark.
- DescribeLogDirs answers one log directory, the node's storage root, with each partition's size: the sum
  of its data files' sizes in the segment index, what `GET /v1/topics/{t}` reports. Every node sees every
  topic, so a node lists the topics it leads and a tool summing the brokers' answers counts each once.
- DescribeProducers answers the idempotent producers of each partition from the log; a Kafka client's
  producer is lakelog's producer `2^61 + (id << 20) + partition` (handlers/produce.py) and is answered
  with its Kafka id.
"""

from __future__ import annotations

import shutil
from typing import Any, TypeAlias

from kafka.protocol.admin import DeleteRecordsResponse, DescribeLogDirsResponse, DescribeProducersResponse

from lakelog.compaction.delete_records import delete_topic_records
from lakelog.kafka_api import nodes
from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import CODES, error_code, error_message
from lakelog.kafka_api.producer_ids import kafka_producer_id
from lakelog.kafka_api.protocol import Call
from lakelog.kafka_api.threads import blocking
from lakelog.platform.acl import CLUSTER, TopicAuthorizationFailed
from lakelog.platform.broker.node import Broker
from lakelog.platform.clock import now_ms
from lakelog.platform.errors import LakelogError
from lakelog.platform.produce.producer_listing import ActiveProducer, partition_producers
from lakelog.platform.storage import Storage

DeletedTopic: TypeAlias = DeleteRecordsResponse.DeleteRecordsTopicResult
DeletedPartition: TypeAlias = DeleteRecordsResponse.DeleteRecordsTopicResult.DeleteRecordsPartitionResult
LogDir: TypeAlias = DescribeLogDirsResponse.DescribeLogDirsResult
LogDirTopic: TypeAlias = DescribeLogDirsResponse.DescribeLogDirsResult.DescribeLogDirsTopic
LogDirPartition: TypeAlias = DescribeLogDirsResponse.DescribeLogDirsResult.DescribeLogDirsTopic.DescribeLogDirsPartition
ProducersTopic: TypeAlias = DescribeProducersResponse.TopicResponse
ProducersPartition: TypeAlias = DescribeProducersResponse.TopicResponse.PartitionResponse
ProducerState: TypeAlias = DescribeProducersResponse.TopicResponse.PartitionResponse.ProducerState
UNKNOWN_SIZE = -1
NO_COORDINATOR_EPOCH, NO_TRANSACTION = -1, -1


# ---- DeleteRecords -----------------------------------------------------------------------------------


async def delete_records(context: Context, call: Call) -> DeleteRecordsResponse:
    topics = []
    for topic in call.body.topics:
        answers = await _delete(context, topic.name, {p.partition_index: p.offset for p in topic.partitions})
        topics.append(DeletedTopic(name=topic.name, partitions=[
            _deleted(p.partition_index, answers[p.partition_index]) for p in topic.partitions]))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


async def _delete(context: Context, topic: str, offsets: dict[int, int]) -> dict[int, int | Exception]:
    if not context.allowed("delete", "topic", topic):
        refused = TopicAuthorizationFailed(f"principal {context.principal!r} may not delete records of {topic!r}")
        return {p: refused for p in offsets}
    try:
        return dict(await blocking(delete_topic_records, context.services.broker, topic, offsets))
    except Exception as exc:  # the topic itself (unknown, storage down): every partition gets it
        return {p: exc for p in offsets}


def _deleted(partition: int, answer: int | Exception) -> DeletedPartition:
    if isinstance(answer, Exception):
        return DeletedPartition(partition_index=partition, low_watermark=-1, error_code=error_code(answer))
    return DeletedPartition(partition_index=partition, low_watermark=answer, error_code=0)


# ---- DescribeLogDirs ---------------------------------------------------------------------------------


async def describe_log_dirs(context: Context, call: Call) -> DescribeLogDirsResponse:
    if not context.allowed("describe", "cluster", CLUSTER):  # Kafka asks DESCRIBE on the cluster
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=CODES["CLUSTER_AUTHORIZATION_FAILED"],
                                       results=[])
    wanted = None if call.body.topics is None else {t.topic: list(t.partitions) for t in call.body.topics}
    broker = context.services.broker
    names = await blocking(lambda: [m.name for m in broker.list_topics()])
    led = [n for n in names if (wanted is None or n in wanted) and nodes.leader(context, n) == nodes.local(context)]
    topics = await blocking(_sizes, broker, led, wanted)
    total, usable = _volume(broker.storage)
    result = LogDir(error_code=0, log_dir=broker.storage.root, topics=topics, total_bytes=total, usable_bytes=usable)
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[result])


def _sizes(broker: Broker, names: list[str], wanted: dict[str, list[int]] | None) -> list[LogDirTopic]:
    topics = []
    for name in names:
        try:
            topic_log = broker.committed_log(name)
            count = broker.topic(name).partitions
        except LakelogError:
            continue  # deleted meanwhile: Kafka leaves out what it does not host
        partitions = [p for p in (wanted or {}).get(name, range(count)) if 0 <= p < count]
        topics.append(LogDirTopic(name=name, partitions=[
            LogDirPartition(partition_index=p, partition_size=topic_log.partition_state(p).size_bytes, offset_lag=0,
                            is_future_key=False) for p in partitions]))
    return topics


def _volume(storage: Storage) -> tuple[int, int]:
    """(total, usable) bytes of the volume a local root is on; unknown (-1) on object storage."""
    if not storage.is_local:
        return UNKNOWN_SIZE, UNKNOWN_SIZE
    try:
        usage = shutil.disk_usage(storage.root)
    except OSError:
        return UNKNOWN_SIZE, UNKNOWN_SIZE
    return usage.total, usage.free


# ---- DescribeProducers -------------------------------------------------------------------------------


async def describe_producers(context: Context, call: Call) -> DescribeProducersResponse:
    topics = []
    for topic in call.body.topics:
        partitions = [await _producers(context, topic.name, p) for p in topic.partition_indexes]
        topics.append(ProducersTopic(name=topic.name, partitions=partitions))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)


async def _producers(context: Context, topic: str, partition: int) -> ProducersPartition:
    try:
        if not context.allowed("read", "topic", topic):
            raise TopicAuthorizationFailed(f"principal {context.principal!r} may not read topic {topic!r}")
        found = await blocking(_partition_producers, context.services.broker, topic, partition)
    except Exception as exc:
        return ProducersPartition(partition_index=partition, error_code=error_code(exc),
                                  error_message=error_message(exc), active_producers=[])
    states = [_state(p, partition) for p in found]
    return ProducersPartition(partition_index=partition, error_code=0, error_message=None,
                              active_producers=[s for s in states if s is not None])


def _partition_producers(broker: Broker, topic: str, partition: int) -> list[ActiveProducer]:
    broker.list_offset(topic, partition, "latest")  # checks the partition, and catches the log up
    return partition_producers(broker.committed_log(topic), partition, now_ms())


def _state(producer: ActiveProducer, partition: int) -> Any:
    kafka_id = kafka_producer_id(producer.producer_id, partition)
    if kafka_id is None:
        return None
    return ProducerState(producer_id=kafka_id, producer_epoch=producer.producer_epoch,
                         last_sequence=producer.last_sequence, last_timestamp=producer.last_timestamp_ms,
                         coordinator_epoch=NO_COORDINATOR_EPOCH, current_txn_start_offset=NO_TRANSACTION)
