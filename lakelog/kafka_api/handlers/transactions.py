"""Kafka transactions: InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn, DescribeTransactions, ListTransactions, and Produce of transactional batches.

Translations onto the node's transaction coordinator (platform/transactions/); every refusal is a Kafka
error code (and, through refusals.py, a log line), never an empty success. A call for a transactional id
another node coordinates is answered NOT_COORDINATOR, after which the client asks FindCoordinator again.
PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH to versions that predate it (KIP-588).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeAlias

import numpy as np
from kafka.protocol.admin.transactions import DescribeTransactionsResponse, ListTransactionsResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    TxnOffsetCommitResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

from lakelog.kafka_api import nodes
from lakelog.kafka_api.batches import ProducedBatch
from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import CODES, KafkaProtocolError, error_code
from lakelog.kafka_api.protocol import Call
from lakelog.kafka_api.threads import blocking
from lakelog.platform.clock import now_ms
from lakelog.platform.errors import LakelogError
from lakelog.platform.records import Marker, ProducerBatch, Stamp, stamp, validate_records
from lakelog.platform.transactions.coordinator import TransactionCoordinator
from lakelog.platform.transactions.state import PendingOffset, Transaction, TxnState

TopicResult: TypeAlias = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
PartitionResult: TypeAlias = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult.AddPartitionsToTxnPartitionResult
OffsetTopic: TypeAlias = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
OffsetPartition: TypeAlias = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic.TxnOffsetCommitResponsePartition
Described: TypeAlias = DescribeTransactionsResponse.TransactionState
Listed: TypeAlias = ListTransactionsResponse.TransactionState
# The first version of each API whose clients know PRODUCER_FENCED (KIP-588); older ones get INVALID_PRODUCER_EPOCH.
FENCED_FROM = {"InitProducerId": 4, "AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2, "EndTxn": 2, "TxnOffsetCommit": 3}


class NotCoordinator(LakelogError):
    code = "NOT_COORDINATOR"
    retriable = True


def _code(exc: BaseException, api: str, version: int) -> int:
    code = error_code(exc)
    if code == CODES["PRODUCER_FENCED"] and version < FENCED_FROM[api]:
        return CODES["INVALID_PRODUCER_EPOCH"]
    return code


def _coordinator(context: Context, transactional_id: str | None) -> TransactionCoordinator:
    if not transactional_id:
        raise KafkaProtocolError("a transactional call without a transactional id", CODES["INVALID_REQUEST"])
    if nodes.transaction_coordinator(context, transactional_id) != nodes.local(context):
        raise NotCoordinator(f"transactional id {transactional_id!r} is coordinated by another node")
    return context.services.transactions()


async def init_producer_id(context: Context, call: Call) -> InitProducerIdResponse:
    request = call.body
    expected = (request.producer_id, request.producer_epoch) if call.version >= 3 else (-1, -1)
    try:
        coordinator = _coordinator(context, request.transactional_id)
        txn = await blocking(coordinator.init_producer_id, request.transactional_id,
                             request.transaction_timeout_ms, expected)
    except Exception as exc:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=_code(exc, "InitProducerId", call.version),
                                      producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=txn.producer_id,
                                  producer_epoch=txn.producer_epoch)


async def add_partitions_to_txn(context: Context, call: Call) -> AddPartitionsToTxnResponse:
    request = call.body  # v0-v3: one transaction (v4+, brokers' batched verification, is not served)
    topics = [(t.name, list(t.partitions)) for t in request.v3_and_below_topics]
    refused: dict[str, int] = {}
    for name, _ in topics:
        if not context.allowed("write", "topic", name):
            refused[name] = CODES["TOPIC_AUTHORIZATION_FAILED"]
        else:
            try:
                await blocking(context.services.broker.topic, name)
            except LakelogError as exc:
                refused[name] = error_code(exc)
    code: int | None = 0
    if refused:  # Kafka adds none when any is refused: the others answer OPERATION_NOT_ATTEMPTED
        code = None
    else:
        try:
            coordinator = _coordinator(context, request.v3_and_below_transactional_id)
            await blocking(coordinator.add_partitions, request.v3_and_below_transactional_id,
                           request.v3_and_below_producer_id, request.v3_and_below_producer_epoch,
                           frozenset((name, p) for name, parts in topics for p in parts))
        except Exception as exc:
            code = _code(exc, "AddPartitionsToTxn", call.version)
    results = [TopicResult(name=name, results_by_partition=[
        PartitionResult(partition_index=p, partition_error_code=refused.get(name, 55 if code is None else code))
        for p in parts]) for name, parts in topics]  # 55: OPERATION_NOT_ATTEMPTED
    return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=results)


async def add_offsets_to_txn(context: Context, call: Call) -> AddOffsetsToTxnResponse:
    request = call.body
    try:
        if not context.allowed("read", "group", request.group_id):
            return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=CODES["GROUP_AUTHORIZATION_FAILED"])
        coordinator = _coordinator(context, request.transactional_id)
        await blocking(coordinator.add_offsets, request.transactional_id, request.producer_id,
                       request.producer_epoch, request.group_id)
    except Exception as exc:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=_code(exc, "AddOffsetsToTxn", call.version))
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=0)


async def txn_offset_commit(context: Context, call: Call) -> TxnOffsetCommitResponse:
    """Held with the transaction and written to the group when it commits (by the transaction's
    coordinator: it need not be the group's)."""
    request = call.body
    offsets = tuple(PendingOffset(request.group_id, t.name, p.partition_index, p.committed_offset,
                                  p.committed_metadata) for t in request.topics for p in t.partitions)
    try:
        if not context.allowed("read", "group", request.group_id):
            code = CODES["GROUP_AUTHORIZATION_FAILED"]
        elif request.transactional_id and nodes.transaction_coordinator(context, request.transactional_id) \
                != nodes.local(context) and nodes.coordinates(context, request.group_id):
            # Sent to the group's coordinator (as clients do), which is not the id's: staged for it.
            await blocking(context.services.transactions().stage_offsets, request.transactional_id,
                           request.producer_id, request.producer_epoch, offsets)
            code = 0
        else:
            coordinator = _coordinator(context, request.transactional_id)
            await blocking(coordinator.txn_offset_commit, request.transactional_id, request.producer_id,
                           request.producer_epoch, offsets)
            code = 0
    except Exception as exc:
        code = _code(exc, "TxnOffsetCommit", call.version)
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[OffsetTopic(name=t.name, partitions=[
        OffsetPartition(partition_index=p.partition_index, error_code=code) for p in t.partitions])
        for t in request.topics])


async def end_txn(context: Context, call: Call) -> EndTxnResponse:
    request = call.body
    try:
        coordinator = _coordinator(context, request.transactional_id)
        await blocking(coordinator.end_txn, request.transactional_id, request.producer_id, request.producer_epoch,
                       bool(request.committed))
    except Exception as exc:
        return EndTxnResponse(throttle_time_ms=0, error_code=_code(exc, "EndTxn", call.version),
                              producer_id=-1, producer_epoch=-1)
    return EndTxnResponse(throttle_time_ms=0, error_code=0, producer_id=-1, producer_epoch=-1)


async def describe_transactions(context: Context, call: Call) -> DescribeTransactionsResponse:
    states = []
    for transactional_id in call.body.transactional_ids:
        try:
            txn = _coordinator(context, transactional_id).describe(transactional_id)
            if txn is None or txn.state is TxnState.DEAD:
                raise KafkaProtocolError(f"unknown transactional id {transactional_id!r}",
                                         CODES["TRANSACTIONAL_ID_NOT_FOUND"])
            states.append(_described(txn))
        except Exception as exc:
            states.append(Described(error_code=error_code(exc), transactional_id=transactional_id,
                                    transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1,
                                    producer_id=-1, producer_epoch=-1, topics=[]))
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)


def _described(txn: Transaction) -> Described:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions):
        topics.setdefault(topic, []).append(partition)
    return Described(error_code=0, transactional_id=txn.transactional_id, transaction_state=txn.state.value,
                     transaction_timeout_ms=txn.timeout_ms, transaction_start_time_ms=txn.started_ms,
                     producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                     topics=[Described.TopicData(topic=t, partitions=p) for t, p in topics.items()])


async def list_transactions(context: Context, call: Call) -> ListTransactionsResponse:
    """The transactional ids this node coordinates (as Kafka's brokers each answer for theirs)."""
    request = call.body
    known = {s.value for s in TxnState}
    wanted = set(request.state_filters or ())
    pids = set(request.producer_id_filters or ())
    duration = request.duration_filter if call.version >= 1 and request.duration_filter >= 0 else None
    pattern = re.compile(request.transactional_id_pattern) if call.version >= 2 and request.transactional_id_pattern \
        else None
    now = now_ms()
    coordinator = context.services.transactions()
    listed = [Listed(transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state.value)
              for t in coordinator.transactions()
              if coordinator.owns(t.transactional_id) and t.state is not TxnState.DEAD
              and (not wanted or t.state.value in wanted)
              and (not pids or t.producer_id in pids)
              and (duration is None or (t.started_ms >= 0 and now - t.started_ms >= duration))
              and (pattern is None or pattern.fullmatch(t.transactional_id))]
    return ListTransactionsResponse(throttle_time_ms=0, error_code=0,
                                    unknown_state_filters=sorted(wanted - known), transaction_states=listed)


class Reserved:
    """A transactional batch's answer: where its records will be (once the transaction commits)."""

    def __init__(self, first: int, count: int) -> None:
        self.offsets = np.arange(first, first + count, dtype=np.int64)


async def produce(context: Context, transactional_id: str | None, topic: str, partition: int,
                  batches: list[ProducedBatch], timeout_ms: int,
                  record_producer_id: Callable[[int, int], int]) -> list[Future]:
    """Stage each transactional batch and reserve its offsets, in order (the caller holds the connection's
    submit lock); the answers are complete futures, as the produce handler expects. The records carry
    `record_producer_id(producer id, partition)`, as the same producer's idempotent batches would."""
    futures: list[Future] = []
    for batch in batches:
        future: Future = Future()
        try:
            if not batch.transactional or batch.producer_id < 0:
                raise KafkaProtocolError("a transactional produce mixes in a non-transactional batch",
                                         CODES["INVALID_RECORD"])
            if not transactional_id:
                raise KafkaProtocolError("transactional batches without a transactional id", CODES["INVALID_REQUEST"])
            coordinator = context.services.transactions()  # any node: verified on the stored state if not its own
            config = context.services.broker.topic(topic).config
            if config.validates_schemas:  # their records are checked and typed on the writer's path, not here
                raise KafkaProtocolError(f"transactions are not served for typed topics ({topic!r} validates "
                                         "schemas): produce without a transactional id", CODES["INVALID_REQUEST"])
            table = batch.file_table()
            validate_records(table, config)
            table = stamp(table, [Stamp(table.num_rows, config.timestamp_type,
                                        ProducerBatch(record_producer_id(batch.producer_id, partition),
                                                      batch.producer_epoch, batch.base_sequence))],
                          now_ms())
            first = await blocking(coordinator.produce, transactional_id, batch.producer_id, batch.producer_epoch,
                                   topic, partition, batch.base_sequence, table, timeout_ms)
            future.set_result(Reserved(first, table.num_rows))
        except Exception as exc:
            future.set_exception(exc)
        futures.append(future)
    return futures


# ---- fetch: transaction markers ---------------------------------------------------------------------

CONTROL_VALUE = struct.pack(">hi", 0, 0)  # version 0, coordinator epoch


class _ControlBatchBuilder(DefaultRecordBatchBuilder):
    def _get_attributes(self, include_compression_type: bool = True) -> int:
        return super()._get_attributes(include_compression_type) | self.CONTROL_MASK


def marker_batch(marker: Marker | None, offset: int) -> bytes:
    """The control batch at `offset` (a transactional one, as Kafka's coordinator writes it): the table's
    marker there, else, for offsets another cause left empty, a commit marker of no producer. Every Kafka
    consumer skips a control batch and continues after it."""
    producer_id, commit = (marker.producer_id, marker.commit) if marker is not None else (-1, True)
    builder = _ControlBatchBuilder(2, 0, True, producer_id, 0, -1, 1 << 20)
    builder.append(0, now_ms(), struct.pack(">hh", 0, 1 if commit else 0), CONTROL_VALUE, [])  # key: version, type
    batch = builder.build()
    struct.pack_into(">q", batch, 0, offset)  # the base offset is outside the CRC
    return bytes(batch)
