"""The broker: one node's entry point to the log core (catalog, logs, produce, fetch).

The HTTP tier, the CLI and the Spark jobs all go through this class. It holds
one `TopicLog` (one DeltaTable) and one flush thread per topic, opened on
first use.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from lakelog.platform.catalog import Catalog, TopicMeta
from lakelog.platform.cluster import Membership, Node
from lakelog.platform.cluster.errors import NotInCluster
from lakelog.platform.cluster.forwarding import NodeClient, TopicForwarder
from lakelog.platform.cluster.ownership import topic_key
from lakelog.platform.cluster.wire import ForwardedCall
from lakelog.platform.clock import now_ms
from lakelog.platform.deadline import Deadline
from lakelog.platform.errors import BrokerClosed, InvalidRequest, OffsetOutOfRange, UnknownTopicOrPartition
from lakelog.platform.fetch import Fetcher
from lakelog.platform.log import PartitionState, TopicLog
from lakelog.platform.partitioner import Partitioner
from lakelog.platform.producer_state import ProducerStateManager
from lakelog.platform.writer import PendingProduce, TopicWriter
from lakelog.platform.records import (
    FetchResult,
    ProduceResult,
    ProducerBatch,
    Record,
    RecordColumns,
    Stamp,
    arrow_to_table,
    columns_to_table,
    records_to_columns,
    stamp,
    validate_records,
)
from lakelog.platform.layout import topic_path
from lakelog.platform.replication import admin as replication_admin
from lakelog.platform.replication.manager import Election, ReplicaManager
from lakelog.platform.storage import Storage
from lakelog.platform.table_retention import advertise_retention
from lakelog.platform.topic_config import TopicConfig
from lakelog.settings import CoreSettings, Settings

log = logging.getLogger(__name__)

ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}


def parse_acks(acks: Any) -> int:
    key = str(acks).lower()
    if key not in ACKS:
        raise InvalidRequest(f"acks must be 0, 1 or all, got {acks!r}")
    return ACKS[key]


@dataclass(frozen=True)
class TopicDescription:
    meta: TopicMeta
    partitions: list[PartitionState]


class OpenTopic:
    """The per-topic machinery of a node: log, writer, partitioner, producer state, waiters."""

    def __init__(self, broker: "Broker", meta: TopicMeta) -> None:
        self.meta = meta
        settings = broker.settings
        self.replica_state = broker.replicas.require_state(meta.name, refresh=True) if broker.replicas else None
        storage, epoch = broker.storage, None
        if self.replica_state is not None:  # write only to the current leader, with its epoch
            storage, epoch = broker.replicas.sites[self.replica_state.leader], self.replica_state.leader_epoch
        self.log = TopicLog(storage, meta.name, settings.tail_cache_bytes, leader_epoch=epoch)
        self.site_logs: dict[str, TopicLog] = {}
        self.partitioner = Partitioner(meta.config.partitioner)
        self.producers = ProducerStateManager(self.log.producer_history)
        self.writer = TopicWriter(self.log, settings.linger_ms, settings.batch_bytes, self.producers,
                                  broker.committed)
        self.forwarders: dict[str, TopicForwarder] = {}  # node id -> calls on their way to that leader

    def close(self) -> None:
        for forwarder in list(self.forwarders.values()):
            forwarder.close()
        self.writer.close()
        self.log.close()


class Broker:
    def __init__(self, settings: CoreSettings | None = None, *, create_catalog: bool = True,
                 **overrides: Any) -> None:
        """`settings`: the core's settings (a full `Settings` is narrowed to them); or keyword overrides.
        `create_catalog=False`: a root without a catalog raises `CatalogMissing` instead of getting one."""
        given = settings if settings is not None else Settings(**overrides)
        self.settings = given.core if isinstance(given, Settings) else given
        self.replicas: ReplicaManager | None = None
        self.storage = Storage.open(self.settings.root, self.settings.storage)
        if self.settings.sites:
            sites = {name: Storage.open(uri, {**self.settings.storage, **self.settings.site_storage.get(name, {})})
                     for name, uri in self.settings.sites.items()}
            self.control_site = self.settings.control_site or next(iter(sites))
            self.storage = sites[self.control_site]  # the catalog and control tables live there
            self.replicas = ReplicaManager(sites, self.settings.replica_lag_time_max_ms)
        self.catalog = Catalog(self.storage, create=create_catalog)
        self._topics: dict[str, OpenTopic] = {}
        self.cluster: Membership | None = None  # set when this node serves in a cluster (`join_cluster`)
        self._nodes: NodeClient | None = None
        self.committed = threading.Condition()  # notified by every topic writer of this node after a commit
        self._fetcher = Fetcher(self.replicas, self.settings.refresh_interval_ms, self.committed)
        self._lock = threading.RLock()
        self._closed = False
        self._reaper = threading.Thread(target=self._expire_loop, name="lakelog-deadlines", daemon=True)
        self._reaper.start()
        self._replication_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lakelog-replicate")
        if self.replicas is not None and self.settings.replication_interval_ms > 0:
            threading.Thread(target=self._replication_loop, name="lakelog-replication", daemon=True).start()

    def _replication_loop(self) -> None:
        """The embedded schedule of the replication job: followers catch up with acks=1 commits."""
        while not self._closed:
            time.sleep(self.settings.replication_interval_ms / 1000)
            try:
                self.sync_replicas()
            except Exception:
                log.exception("replication round failed")

    def _expire_loop(self) -> None:
        """Produce never blocks without bound: callers past their deadline get a retriable error."""
        while not self._closed:
            time.sleep(0.1)
            with self._lock:
                writers = [t.writer for t in self._topics.values()]
            for writer in writers:
                writer.expire(time.monotonic())

    # ---- topics -----------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None,
                     replicas: Sequence[str] | None = None) -> TopicMeta:
        """`replicas`: the sites holding the topic, the first the preferred leader (default: spread)."""
        if self.replicas is None:
            if replicas:
                raise InvalidRequest("replica sites given, but no sites are configured")
            return self.catalog.create_topic(name, partitions, config)
        manager = self.replicas

        def create_replicated(parsed: TopicConfig) -> None:
            state = manager.assign(name, parsed.replication_factor, replicas)
            manager.create(state, lambda storage: TopicLog.create_table(
                storage, name, file_delete_delay_ms=parsed.file_delete_delay_ms))

        return self.catalog.create_topic(name, partitions, config, create_table=create_replicated)

    def list_topics(self) -> list[TopicMeta]:
        self.catalog.refresh()
        return self.catalog.list_topics()

    def alter_topic_config(self, name: str, changes: Mapping[str, Any]) -> TopicMeta:
        meta = self.catalog.alter_config(name, changes)
        self._update_meta(meta)
        if "file.delete.delay.ms" in changes:  # the table advertises it as Delta's deleted-file retention
            advertise_retention(lambda: self.topic_log(name), meta.config.file_delete_delay_ms)
        return meta

    def add_partitions(self, name: str, total: int) -> TopicMeta:
        meta = self.catalog.add_partitions(name, total)
        self._update_meta(meta)
        return meta

    def delete_topic(self, name: str) -> None:
        with self._lock:
            opened = self._topics.pop(name, None)
        if opened is not None:
            opened.close()
        self.catalog.delete_topic(name)
        if self.replicas is not None:
            for storage in self.replicas.sites.values():
                try:
                    storage.delete_tree(storage.uri(topic_path(name)))
                except OSError:
                    log.warning("topic %s not deleted at %s (unreachable)", name, storage.root)

    def describe_topic(self, name: str) -> TopicDescription:
        topic = self._open(name)
        topic.log.refresh()
        return TopicDescription(topic.meta, [topic.log.partition_state(p) for p in range(topic.meta.partitions)])

    def topic(self, name: str) -> TopicMeta:
        return self._open(name).meta

    def topic_log(self, name: str) -> TopicLog:
        return self._open(name).log

    def _update_meta(self, meta: TopicMeta) -> None:
        with self._lock:
            opened = self._topics.get(meta.name)
            if opened is not None:
                opened.meta = meta

    def _open(self, name: str) -> OpenTopic:
        if self._closed:
            raise BrokerClosed("the broker is closed")
        with self._lock:
            opened = self._topics.get(name)
            if opened is not None:
                return opened
        meta = self.catalog.get(name)
        with self._lock:
            opened = self._topics.get(name)
            if opened is None:
                opened = self._topics[name] = OpenTopic(self, meta)
            return opened

    def _partition_check(self, topic: OpenTopic, partition: int) -> None:
        if not isinstance(partition, int) or not 0 <= partition < topic.meta.partitions:
            self.catalog.refresh()  # partitions may have been added by another node
            meta = self.catalog.get(topic.meta.name)
            topic.meta = meta
            if not isinstance(partition, int) or not 0 <= partition < meta.partitions:
                raise UnknownTopicOrPartition(
                    f"unknown partition {partition!r} of topic {meta.name!r} (partitions 0..{meta.partitions - 1})"
                )

    # ---- produce ----------------------------------------------------------

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
            validate_records(columns_to_table([batch]) if isinstance(batch, RecordColumns) else batch, config)
        pending = PendingProduce(batch, partitions, self._deadline(timeout_ms), config, producer, acks_level)
        leader = self._remote_leader(topic)
        if leader is not None:
            future = self._forwarder(opened, leader).submit(pending)
        else:
            future = self._submit_here(opened, pending)
        return _answered_now(partitions) if acks_level == 0 else future

    def _submit_here(self, opened: OpenTopic, pending: PendingProduce) -> Future:
        """This node commits the call (it leads the topic, or the leader is out of reach)."""
        replicate = pending.acks == -1 and self.replicas is not None and opened.replica_state is not None
        if replicate:
            self.replicas.ensure_in_sync(opened.meta.name, opened.meta.config.min_insync_replicas)
        future = opened.writer.submit(pending)
        return self._after_replication(opened, future) if replicate else future

    def produce_forwarded(self, topic: str, calls: Sequence[ForwardedCall]) -> list[Future]:
        """Calls another node checked, partitioned and forwarded here (the topic's leader): committed here,
        with this node's own calls, whatever this node's view of the leadership (it is never forwarded on)."""
        opened = self._open(topic)
        highest = max(int(call.partitions.max()) for call in calls)
        self._partition_check(opened, highest)  # the sender may know of partitions added since we looked
        config = opened.meta.config
        return [self._submit_here(opened, PendingProduce(call.table, call.partitions,
                                                         Deadline.after_ms(call.timeout_ms), config,
                                                         call.producer, call.acks))
                for call in calls]

    # ---- cluster ------------------------------------------------------------

    def join_cluster(self, membership: Membership, client: NodeClient) -> None:
        """Serve as one node of a cluster: topics led by other nodes have their produce calls forwarded."""
        self.cluster, self._nodes = membership, client

    def _remote_leader(self, topic: str) -> Node | None:
        """The leader when it is another node; None when it is this one or this node has no fresh view
        (writing here is always correct, only not the cheapest)."""
        if self.cluster is None:
            return None
        try:
            view = self.cluster.view()
        except NotInCluster:
            return None
        leader = view.owner(topic_key(topic))
        return None if view.is_local(leader) else leader

    def led_partition_states(self) -> dict[str, list[PartitionState]] | None:
        """The partitions of each topic this node has open and leads, as it knows them: memory only, no
        storage request and no topic opened (what the history samples every few seconds). The leader's own
        commits are known without reading them back; other writers' (maintenance jobs, a node that could not
        reach it) show once something refreshes the log (a describe, a conflict). Topics the catalog no
        longer has (it is re-read about once a second) are left out. None without a fresh view of the
        cluster: which topics this node leads is unknown then."""
        view = None
        if self.cluster is not None:
            try:
                view = self.cluster.view()
            except NotInCluster:
                return None
        with self._lock:
            opened = list(self._topics.items())
        states = {}
        for name, topic in opened:
            if view is not None and not view.is_local(view.owner(topic_key(name))):
                continue
            try:
                partitions = self.catalog.get(name, refresh=False).partitions
            except UnknownTopicOrPartition:
                continue
            states[name] = [topic.log.partition_state(p) for p in range(partitions)]
        return states

    def _forwarder(self, opened: OpenTopic, leader: Node) -> TopicForwarder:
        with self._lock:
            forwarder = opened.forwarders.get(leader.node_id)
            if forwarder is None or forwarder.leader != leader:
                forwarder = opened.forwarders[leader.node_id] = TopicForwarder(
                    opened.meta.name, leader, self._nodes, lambda p: self._submit_here(opened, p),  # type: ignore
                    self.settings.batch_bytes, self.cluster.suspect)  # type: ignore[union-attr]
            return forwarder

    def _deadline(self, timeout_ms: int | None) -> Deadline:
        return Deadline.after_ms(self.settings.request_timeout_ms if timeout_ms is None else timeout_ms)

    def _after_replication(self, opened: OpenTopic, committed: Future) -> Future:
        """acks=all: answered once the commit is on min.insync.replicas sites."""
        answered: Future = Future()
        epoch = opened.replica_state.leader_epoch  # type: ignore[union-attr]

        def replicate() -> None:
            try:
                result = committed.result()
                if not result.duplicate:
                    self.replicas.replicate(opened.meta.name, result.version,  # type: ignore[union-attr]
                                            opened.meta.config.min_insync_replicas, epoch)
                answered.set_result(result)
            except BaseException as exc:
                answered.set_exception(exc)

        committed.add_done_callback(lambda _: self._replication_pool.submit(replicate))
        return answered

    def produce(self, topic: str, records: Sequence[Record] | pa.Table, acks: Any = 1,
                timeout_ms: int | None = None, producer: ProducerBatch | None = None) -> ProduceResult:
        future = self.produce_async(topic, records, acks, timeout_ms, producer)
        return future.result()

    def append_exactly_once(self, topic: str, records: pa.Table, app_id: str, version: int,
                            timeout_ms: int | None = None) -> ProduceResult | None:
        """Write a batch once: committed with SetTransaction(app_id, version), skipped (None) if already there.

        For writers that replay batches after a failure (the Spark sink: app id
        = query id, version = batch id). Bypasses group commit: one call, one commit.
        """
        opened = self._open(topic)
        table, explicit = arrow_to_table(records)
        validate_records(table, opened.meta.config)
        partitions = opened.partitioner.assign(table.column("key"), explicit, opened.meta.partitions,
                                               topic)
        table = stamp(table, [Stamp(table.num_rows, opened.meta.config.timestamp_type)], now_ms())
        appended = opened.log.append(table, partitions, self._deadline(timeout_ms), (app_id, version))
        if appended is None:
            return None
        opened.writer.notify_committed()
        return ProduceResult(partitions, appended.offsets, table.column("timestamp").cast(pa.int64()).to_numpy(),
                             version=appended.version)

    # ---- fetch ------------------------------------------------------------

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int = 500,
        max_bytes: int | None = None,
        timeout_ms: int = 0,
        site: str | None = None,
        min_bytes: int = 1,
    ) -> FetchResult:
        """Records from the first offset >= `offset`; waits up to `timeout_ms` for new data (long poll)
        until at least `min_bytes` of keys and values are there (Kafka's fetch.min.bytes).

        `site` (default: the node's `site` setting) prefers that site's replica when it is in sync.
        """
        if max_records < 1:
            raise InvalidRequest(f"max_records must be >= 1, got {max_records}")
        opened = self._open(topic)
        self._partition_check(opened, partition)
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise InvalidRequest(f"offset must be an integer, got {offset!r}")
        return self._fetcher.fetch(opened, partition, offset, max_records, max_bytes, timeout_ms,
                                   site or self.settings.site, min_bytes, lambda: self._closed,
                                   led_elsewhere=self._remote_leader(topic) is not None)

    def wait_for_commit(self, timeout_s: float) -> None:
        """Block until a topic of this node commits, or `timeout_s` passes (long polls over many topics)."""
        with self.committed:
            self.committed.wait(max(timeout_s, 0))

    def list_offset(self, topic: str, partition: int, spec: str | int) -> int:
        """`earliest`, `latest`, or a timestamp in ms: the earliest offset at or after it (latest if none)."""
        opened = self._open(topic)
        self._partition_check(opened, partition)
        opened.log.refresh()
        return opened.log.offset_for(partition, spec)

    def check_offset(self, topic: str, partition: int, offset: int) -> None:
        """Raise OffsetOutOfRange when `offset` is outside [log start, log end], as the log is now: what
        this node knew is looked at again first (another node may have written past it)."""
        opened = self._open(topic)
        start, end = opened.log.log_start_offset(partition), opened.log.log_end_offset(partition)
        if not start <= offset <= end:
            opened.log.refresh()
            start, end = opened.log.log_start_offset(partition), opened.log.log_end_offset(partition)
        if not start <= offset <= end:
            raise OffsetOutOfRange(f"offset {offset} out of range [{start}, {end}] for {topic}-{partition}",
                                   start, end)

    # ---- replication ----------------------------------------------------------

    def sync_replicas(self, topics: Sequence[str] | None = None) -> list:
        """One catch-up round: every follower of every topic, then the control tables."""
        if self.replicas is None:
            return []
        names = topics if topics is not None else [t.name for t in self.list_topics()]
        return replication_admin.sync_all(self.replicas, names, self.control_site)

    def elect_leader(self, topic: str, site: str | None = None, unclean: bool = False) -> Election:
        if self.replicas is None:
            raise InvalidRequest("no sites configured: there is nothing to elect")
        self.topic(topic)
        election = self.replicas.elect(topic, site, unclean)
        self._reopen(topic)
        return election

    def replica_report(self, topic: str) -> dict:
        """Leader, in-sync set and the lag of each follower, per site and per partition."""
        if self.replicas is None:
            raise InvalidRequest("no sites configured: the topic has one replica")
        meta = self.topic(topic)
        leader_log = self._open(topic).log
        leader_log.refresh()
        return replication_admin.report(self.replicas, topic, meta.partitions, leader_log)

    def _reopen(self, name: str) -> None:
        """Drop a topic's machinery so that its next use opens on the current leader.

        The old leader may be unreachable: its flush is not waited for past a few
        seconds, and whoever still waits on it gets a retriable error.
        """
        with self._lock:
            opened = self._topics.pop(name, None)
        if opened is not None:
            opened.writer.close(timeout=5)
            opened.writer.expire(float("inf"))

    # ---- lifecycle ----------------------------------------------------------

    def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        with self._lock:
            topics = list(self._topics.values())
        for opened in topics:
            opened.writer.drain()

    def close(self) -> None:
        """Stop taking produce calls, commit what is pending, release the topics."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            topics = list(self._topics.values())
            self._topics.clear()
        for opened in topics:
            opened.close()
        self._replication_pool.shutdown(wait=True)
        if self._nodes is not None:
            self._nodes.close()

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
