"""The broker's produce face: produce calls partitioned, queued for the node journal or forwarded to the
topic's leader node, a journal flush that met a fence sent again until its deadline, acks=all answered once
replicated, the Spark sink's exactly-once appends (through the journal's exclusive door).

Owns `Producing`, the face the broker holds and answers produce calls with, and the checks of a
produce call's acks and producer fields. Any thread may call it: the HTTP tier's request threads, the
Kafka listener's workers, the CLI, the Spark sink, the cluster endpoint's threads for forwarded calls.
Futures complete on the journal's flush thread or, for acks=all and for a call sent again after a fence,
on the broker's replication pool.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Executor, Future
from dataclasses import replace
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from lakelog.platform.broker.open_topic import OpenTopic
from lakelog.platform.broker.seat import ClusterSeat
from lakelog.platform.clock import now_ms
from lakelog.platform.cluster import Node
from lakelog.platform.cluster.forward_objects import read_forwarded
from lakelog.platform.cluster.forwarding import TopicForwarder
from lakelog.platform.cluster.reference import ProduceReference
from lakelog.platform.cluster.traffic import Traffic
from lakelog.platform.cluster.wire import ForwardedCall
from lakelog.platform.deadline import Deadline
from lakelog.platform.errors import InvalidRequest, LakelogError
from lakelog.platform.journal.errors import JournalFenced
from lakelog.platform.journal.node import NodeJournal
from lakelog.platform.produce.admission import PendingProduce
from lakelog.platform.produce.group_commit import copy_outcome, fail
from lakelog.platform.records import (
    ProducerBatch,
    ProduceResult,
    Record,
    RecordColumns,
    Stamp,
    arrow_to_table,
    columns_to_table,
    records_to_columns,
    stamp,
    validate_records,
)
from lakelog.platform.replication.manager import ReplicaManager
from lakelog.platform.storage import STORAGE_ERRORS, Storage
from lakelog.settings import CoreSettings

log = logging.getLogger(__name__)
ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}


def parse_acks(acks: Any) -> int:
    key = str(acks).lower()
    if key not in ACKS:
        raise InvalidRequest(f"acks must be 0, 1 or all, got {acks!r}")
    return ACKS[key]


class Producing:
    """The broker's produce calls.

    Thread contract: any thread may call it (the module's note). Its own state is the topics' forwarders
    (`OpenTopic.forwarders`, one per leader node), created and replaced under `_lock`; the rest is its
    parts': the open topics (`open_topic`, `check_partition`), the journal, the replicas, the cluster
    seat. Futures complete on the journal's flush thread or on `pool` (the broker's replication pool).
    """

    def __init__(self, open_topic: Callable[[str], OpenTopic], check_partition: Callable[[OpenTopic, int], None],
                 journal: NodeJournal, replicas: ReplicaManager | None, seat: ClusterSeat, traffic: Traffic,
                 storage: Storage, settings: CoreSettings, pool: Executor) -> None:
        """`open_topic(name)`: the topic's machinery (opened on first use); `check_partition(opened, p)`:
        raises UnknownTopicOrPartition unless p is one of its partitions; `replicas`: the sites, when
        configured; `seat`: the node's place in the cluster (leaders, the other nodes, forward objects);
        `traffic`: produce bytes taken and forwarded; `storage`: where forward objects are read;
        `settings`: the request timeout and batch size; `pool`: runs acks=all replication and calls sent
        again after a fence, off the journal's flush thread."""
        self._open = open_topic
        self._partition_check = check_partition
        self._journal = journal
        self._replicas = replicas
        self._seat = seat
        self._traffic = traffic
        self._storage = storage
        self._settings = settings
        self._pool = pool
        self._lock = threading.Lock()

    def produce_async(
        self,
        topic: str,
        records: Sequence[Record] | RecordColumns | pa.Table,
        acks: Any = 1,
        timeout_ms: int | None = None,
        producer: ProducerBatch | None = None,
    ) -> Future:
        """Partition and queue for the next flush, which checks the records (`validate_records`) in bulk with
        the other calls it commits; the future gives a ProduceResult or the error of a bad record. In a
        cluster, a topic led by another node has its calls checked here and forwarded to the leader."""
        acks_level = parse_acks(acks)
        opened = self._open(topic)
        config = opened.meta.config
        if isinstance(records, pa.Table):
            batch, explicit = arrow_to_table(records)
            keys: Any = batch.column("key")
        else:
            batch = records if isinstance(records, RecordColumns) else records_to_columns(records)
            explicit, keys = batch.partitions, batch.keys
        if producer is not None:
            _check_producer(producer)
        partitions = opened.partitioner.assign(keys, explicit, opened.meta.partitions, topic)
        if acks_level == 0:  # answered before the flush: bad records must be refused here
            try:
                validate_records(columns_to_table([batch]) if isinstance(batch, RecordColumns) else batch, config)
            except LakelogError as exc:  # an acks=0 producer never hears of it: the log says it
                log.warning("produce to %s refused, nothing written: %s: %s", topic, exc.code, exc.message)
                raise
        pending = PendingProduce(batch, partitions, self._deadline(timeout_ms), config, producer, acks_level)
        self._traffic.produced(pending.nbytes)
        future = self._route(opened, pending)
        return _answered_now(partitions) if acks_level == 0 else future

    def _route(self, opened: OpenTopic, pending: PendingProduce) -> Future:
        """To the topic's leader node, or here. A journal flush of the call that met a fence is routed again
        (`_submit_here`) until its deadline."""
        leader = self._seat.remote_leader(opened.meta.name)
        if leader is not None:
            return self._forwarder(opened, leader).submit(pending)
        name = opened.meta.name
        return self._submit_here(opened, pending, lambda retry: self._route(self._open(name), retry))

    def _submit_here(self, opened: OpenTopic, pending: PendingProduce,
                     fenced_again: Callable[[PendingProduce], Future] | None = None) -> Future:
        """This node acknowledges the call (it leads the topic, or the leader is out of reach): on the node
        journal, the table committed behind it. A journal flush of the call that met a fence (another
        generation took the topic; nothing of the flush landed, and the writer went on in a new generation)
        sends it through `fenced_again` until its deadline, as the client's retry would, rather than answer a
        retriable error: two processes writing one topic take it from each other, and a node whose journal
        was fenced while it was cut off from the store takes its topics back at its first produce after it
        rejoins (or forwards the call to the node its view now names)."""
        if pending.acks == -1 and opened.replica_state is not None:
            return self._submit_replicated(opened, pending, fenced_again)
        if fenced_again is not None:
            pending.resend = lambda call: self._send_again(opened.meta.name, fenced_again, call)
        return self._journal.submit(opened, pending)

    def _send_again(self, topic: str, again: Callable[[PendingProduce], Future], call: PendingProduce) -> None:
        """The call routed again on the broker's pool, off the journal's flush thread, answering its own future
        (its records checked again by the next flush)."""
        log.info("produce to %s met a journal fence: sent again", topic)

        def send() -> None:
            try:
                again(replace(call, table=None, resend=None))
            except BaseException as exc:  # routing refused it (the broker closing, say)
                fail(call.future, exc)

        self._pool.submit(send)

    def _submit_replicated(self, opened: OpenTopic, pending: PendingProduce,
                           fenced_again: Callable[[PendingProduce], Future] | None) -> Future:
        """acks=all on a replicated topic: answered once the commit is on min.insync.replicas sites. A call
        sent again after a fence waits for its new leader's copies, so each sending has a future of its own."""
        replicas = self._replicas
        assert replicas is not None
        replicas.ensure_in_sync(opened.meta.name, opened.meta.config.min_insync_replicas)
        future = self._after_replication(opened, pending, self._journal.submit(opened, pending), replicas)
        if fenced_again is None:
            return future
        answered: Future = Future()

        def settle(done: Future) -> None:
            if isinstance(done.exception(), JournalFenced) and not pending.deadline.passed():
                log.info("produce to %s met a journal fence: sent again", opened.meta.name)
                self._pool.submit(send_again)
            else:
                copy_outcome(done, answered)

        def send_again() -> None:
            try:
                fenced_again(replace(pending, future=Future())).add_done_callback(lambda d: copy_outcome(d, answered))
            except BaseException as exc:  # routing refused it (the broker closing, say)
                fail(answered, exc)

        future.add_done_callback(settle)
        return answered

    def produce_forwarded(self, topic: str, calls: Sequence[ForwardedCall]) -> list[Future]:
        """Calls another node checked, partitioned and forwarded here (the topic's leader): committed here,
        with this node's own calls, whatever this node's view of the leadership (it is never forwarded on)."""
        opened = self._open(topic)
        highest = max(int(call.partitions.max()) for call in calls)
        self._partition_check(opened, highest)  # the sender may know of partitions added since we looked
        config = opened.meta.config
        here = lambda retry: self._submit_here(self._open(topic), retry)  # noqa: E731 (met a fence: here again)
        return [self._submit_here(opened, PendingProduce(call.table, call.partitions,
                                                         Deadline.after_ms(call.timeout_ms), config,
                                                         call.producer, call.acks), here)
                for call in calls]

    def produce_by_reference(self, topic: str, reference: ProduceReference) -> list[Future]:
        """Calls another node (its journal on) wrote to a forward object and sent a reference to: read and
        checked against the reference, then as `produce_forwarded`. A missing object (retriable), an object
        that is not what the reference says, or a failed read raise before anything is written."""
        return self.produce_forwarded(topic, read_forwarded(self._storage, reference))

    def _forwarder(self, opened: OpenTopic, leader: Node) -> TopicForwarder:
        with self._lock:
            forwarder = opened.forwarders.get(leader.node_id)
            if forwarder is None or forwarder.leader != leader:
                seat = self._seat
                assert seat.nodes is not None and seat.cluster is not None  # only a node in a cluster forwards
                forwarder = opened.forwarders[leader.node_id] = TopicForwarder(
                    opened.meta.name, leader, seat.nodes, lambda p: self._submit_here(opened, p),
                    self._settings.batch_bytes, seat.cluster.suspect,
                    seat.forward_objects, self._traffic)
            return forwarder

    def _deadline(self, timeout_ms: int | None) -> Deadline:
        return Deadline.after_ms(self._settings.request_timeout_ms if timeout_ms is None else timeout_ms)

    def _after_replication(self, opened: OpenTopic, pending: PendingProduce, committed: Future,
                           replicas: ReplicaManager) -> Future:
        """acks=all: answered once the commit is on min.insync.replicas sites."""
        answered: Future = Future()
        assert opened.replica_state is not None  # a replicated topic's
        epoch = opened.replica_state.leader_epoch

        def replicate() -> None:
            try:
                result = committed.result()  # the records go to the leader's table now, then to the copies
                version = self._journal.replicated_version(opened, result, pending.deadline)
                replicas.replicate(opened.meta.name, version, opened.meta.config.min_insync_replicas, epoch)
                self._journal.replicated(opened, version)
                answered.set_result(result)
            except BaseException as exc:
                answered.set_exception(exc)

        committed.add_done_callback(lambda _: self._pool.submit(replicate))
        return answered

    def produce(self, topic: str, records: Sequence[Record] | pa.Table, acks: Any = 1,
                timeout_ms: int | None = None, producer: ProducerBatch | None = None) -> ProduceResult:
        """Produce and wait for the answer, then for the topic's table: an embedded caller that reads the
        table next (DuckDB, Spark, a time-travel read) finds the records. The servers answer at the journal's
        acknowledgement instead (`produce_async`), the table following within `table.commit.interval.ms`. A
        topic another node leads is that node's to commit. The records are acknowledged once the answer comes:
        a table commit that fails here is logged and left to the committer, which tries again."""
        result = self.produce_async(topic, records, acks, timeout_ms, producer).result()
        if parse_acks(acks) != 0:
            try:
                self._journal.commit_topic(self._open(topic))
            except (LakelogError, *STORAGE_ERRORS) as exc:
                log.warning("records of %s acknowledged; their table commit failed (tried again): %s", topic, exc)
        return result

    def append_exactly_once(self, topic: str, records: pa.Table, app_id: str, version: int,
                            timeout_ms: int | None = None) -> ProduceResult | None:
        """Write a batch once: committed with SetTransaction(app_id, version), skipped (None) if already there.

        For writers that replay batches after a failure (the Spark sink: app id
        = query id, version = batch id). One call, one commit, through the node journal's exclusive door:
        the topic's acknowledged entries are committed first, and no flush assigns offsets meanwhile.
        """
        opened = self._open(topic)
        table, explicit = arrow_to_table(records)
        validate_records(table, opened.meta.config)
        partitions = opened.partitioner.assign(table.column("key"), explicit, opened.meta.partitions,
                                               topic)
        table = stamp(table, [Stamp(table.num_rows, opened.meta.config.timestamp_type)], now_ms())
        with self._journal.exclusive(opened):
            appended = opened.log.append(table, partitions, self._deadline(timeout_ms), (app_id, version))
        if appended is None:
            return None
        opened.notify_committed()
        return ProduceResult(partitions, appended.offsets, table.column("timestamp").cast(pa.int64()).to_numpy(),
                             version=appended.version)


def _answered_now(partitions: np.ndarray) -> Future:
    """acks=0: the answer (no offsets) does not wait for the commit."""
    done: Future = Future()
    n = len(partitions)
    done.set_result(ProduceResult(partitions, np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)))
    return done


def _check_producer(producer: ProducerBatch) -> None:
    if producer.producer_id < 0:
        raise InvalidRequest(f"producer_id must be >= 0, got {producer.producer_id}")
    if not 0 <= producer.producer_epoch <= 32767:
        raise InvalidRequest(f"producer_epoch must be 0..32767, got {producer.producer_epoch}")
    if not 0 <= producer.base_sequence <= 2**31 - 1:
        raise InvalidRequest(f"sequence must be 0..2^31-1, got {producer.base_sequence}")
