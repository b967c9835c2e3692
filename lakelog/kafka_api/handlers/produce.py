"""Produce and InitProducerId: Kafka's idempotent producer on lakelog's.

Each (Kafka producer id, partition) is its own lakelog producer id (producer_ids.py), so Kafka's
per-partition sequence rule is kept exactly. Producer ids are drawn at random from 2^40 (no coordination
between nodes; Kafka's non-transactional InitProducerId promises a fresh id, not a sequence).
"""

from __future__ import annotations

import asyncio
import secrets
from concurrent.futures import Future
from typing import Any, TypeAlias

import numpy as np
from kafka.protocol.producer import InitProducerIdResponse, ProduceRequest, ProduceResponse

from lakelog.kafka_api.batches import ProducedBatch, decode_produce
from lakelog.kafka_api.context import Context, Services
from lakelog.kafka_api.errors import error_code, error_message
from lakelog.kafka_api.handlers import offsets_topic, transactions
from lakelog.kafka_api.producer_ids import lakelog_producer_id
from lakelog.kafka_api.protocol import Call
from lakelog.kafka_api.threads import blocking
from lakelog.platform.acl import TopicAuthorizationFailed
from lakelog.platform.broker.node import Broker
from lakelog.platform.errors import LakelogError, RecordsRefused
from lakelog.platform.records import ProducerBatch
from lakelog.platform.typed import produce as typed_produce

TopicResponse: TypeAlias = ProduceResponse.TopicProduceResponse
PartitionResponse: TypeAlias = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
PRODUCER_ID_BITS = 40
Outcome = list[Any] | BaseException  # a partition's produce results, or the error that refused them


async def init_producer_id(context: Context, call: Call) -> InitProducerIdResponse:
    request = call.body
    if request.transactional_id is not None:
        return await transactions.init_producer_id(context, call)
    if 0 <= request.producer_id < 1 << PRODUCER_ID_BITS and request.producer_epoch >= 0:  # KIP-360: bump the epoch
        if request.producer_epoch >= 32766:
            return InitProducerIdResponse(error_code=0, producer_id=_new_producer_id(), producer_epoch=0)
        return InitProducerIdResponse(error_code=0, producer_id=request.producer_id,
                                      producer_epoch=request.producer_epoch + 1)
    return InitProducerIdResponse(error_code=0, producer_id=_new_producer_id(), producer_epoch=0)


def _new_producer_id() -> int:
    return secrets.randbits(PRODUCER_ID_BITS - 1) + 1


async def produce(context: Context, call: Call) -> ProduceResponse | None:
    request = call.body
    async with context.submit_lock:  # pipelined requests reach the writer in the order they were sent
        pending = [(topic.name, [(p.index, await _submit(context, topic.name, p.index, p.records, request))
                                 for p in topic.partition_data])
                   for topic in request.topic_data]
    if request.acks == 0:
        return None
    outcomes = [(name, [(index, await _outcome(submitted)) for index, submitted in partitions])
                for name, partitions in pending]
    written = [(name, index) for name, partitions in outcomes for index, outcome in partitions
               if not isinstance(outcome, BaseException)]
    starts = await blocking(_log_starts, context.services.broker, written) if written else {}
    return ProduceResponse(throttle_time_ms=0, responses=[
        TopicResponse(name=name, partition_responses=[_answer(index, outcome, starts.get((name, index), -1))
                                                      for index, outcome in partitions])
        for name, partitions in outcomes])


async def _submit(context: Context, topic: str, partition: int, records: bytes | None,
                  request: ProduceRequest) -> list[Future] | BaseException:
    """The futures of one partition's batches, or the error that refused them all."""
    try:
        if not context.allowed("write", "topic", topic):
            raise TopicAuthorizationFailed(f"principal {context.principal!r} may not write topic {topic!r}")
        if offsets_topic.is_offsets_topic(topic):
            raise offsets_topic.produce_refused(context)
        services = context.services
        if topic not in services.open_topics:  # the first use opens the table: storage I/O off the loop
            await blocking(services.broker.topic, topic)
            services.open_topics.add(topic)
        acks = "all" if request.acks == -1 else request.acks
        batches = decode_produce(records, partition, request.API_VERSION)
        if any(batch.transactional for batch in batches):  # held outside the table until the transaction ends
            return await transactions.produce(context, getattr(request, "transactional_id", None), topic, partition,
                                              batches, request.timeout_ms, lakelog_producer_id)
        if services.broker.topic(topic).config.validates_schemas:
            return await _submit_typed(services, topic, partition, batches, acks, request.timeout_ms)
        return [services.broker.produce_async(topic, batch.records, acks, request.timeout_ms,
                                              _producer(batch, partition))
                for batch in batches]
    except Exception as exc:
        return exc


async def _submit_typed(services: Services, topic: str, partition: int, batches: list[ProducedBatch], acks: object,
                        timeout_ms: int) -> list[Future]:
    """A typed topic's batches: all checked (off the loop: decoding, maybe registry I/O) before any is queued,
    so a bad record refuses the partition's whole data; indexes count across its batches."""
    validator = await blocking(services.record_validator)
    screened, before = [], 0
    for batch in batches:
        try:
            screened.append(await blocking(typed_produce.screen, services.broker, validator, topic, batch.records,
                                           _producer(batch, partition)))
        except RecordsRefused as exc:
            raise RecordsRefused(exc.message, [(before + i, m) for i, m in exc.record_errors]) from None
        before += len(batch.records)
    return [typed_produce.submit(services.broker, checked, acks, timeout_ms, _producer(batch, partition))
            for checked, batch in zip(screened, batches)]


def _producer(batch: ProducedBatch, partition: int) -> ProducerBatch | None:
    if not batch.idempotent:
        return None
    return ProducerBatch(lakelog_producer_id(batch.producer_id, partition), batch.producer_epoch,
                         batch.base_sequence)


async def _outcome(submitted: list[Future] | BaseException) -> Outcome:
    """The results of a partition's batches, or the error that refused them."""
    try:
        if isinstance(submitted, BaseException):
            raise submitted
        return [await asyncio.shield(asyncio.wrap_future(future)) for future in submitted]
    except Exception as exc:
        return exc


def _log_starts(broker: Broker, written: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Each written partition's log start offset, as ListOffsets earliest answers it but as the node already
    knows it (the log's index and the snapshot's versions: no refresh, so the answer waits for no storage
    round trip); -1 where it cannot say (the topic deleted meanwhile)."""
    starts = {}
    for topic, partition in written:
        try:
            starts[(topic, partition)] = broker.topic_log(topic).log_start_offset(partition)
        except LakelogError:
            starts[(topic, partition)] = -1
    return starts


def _answer(index: int, outcome: Outcome, log_start_offset: int) -> PartitionResponse:
    if isinstance(outcome, BaseException):  # Kafka answers -1 for the offsets of a refused partition
        return PartitionResponse(index=index, error_code=error_code(outcome), base_offset=-1, log_append_time_ms=-1,
                                 log_start_offset=-1, record_errors=_record_errors(outcome),
                                 error_message=error_message(outcome))
    return PartitionResponse(index=index, error_code=0, base_offset=_base_offset(outcome), log_append_time_ms=-1,
                             log_start_offset=log_start_offset, record_errors=[], error_message=None)


def _base_offset(results: list[Any]) -> int:
    """The first record's offset; a typed topic's dead-lettered records have none (-1): the first written."""
    for result in results:
        offsets = np.asarray(result.offsets)
        written = offsets[offsets >= 0]
        if len(written):
            return int(written[0])
    return -1


def _record_errors(exc: BaseException) -> list[Any]:
    """Kafka's per-record errors (Produce v8+, KIP-467) of a refused typed-topic batch."""
    if not isinstance(exc, RecordsRefused):
        return []
    return [PartitionResponse.BatchIndexAndErrorMessage(batch_index=index, batch_index_error_message=message)
            for index, message in exc.record_errors]
