"""The broker: one node's entry point to the log core (catalog, logs, produce, fetch).

The HTTP tier, the CLI and the Spark jobs all go through this class. It holds
one `TopicLog` (one DeltaTable) per topic, opened on first use, and one node
journal (journal/node.py), through which every record is acknowledged: one
flush thread for all topics, the tables committed behind it.

Built from collaborators that own their state, each given what it needs: the open topics in
`broker/topics.py` (`OpenTopics`, under its own lock), the node's seat in a cluster in `broker/seat.py`
(`ClusterSeat`), the produce face in `broker/produce.py` (`Producing`), the log ends in `broker/ends.py`
(`LogEnds`: describe, `latest`, offset checks, with the journal's reads), the per-topic machinery in
`open_topic.py`, fetch and the high watermark in `fetch.py`. This module owns the node's set-up, topic
admin, the cluster view, the doors to produce, the ends, fetch and replication admin, and the lifecycle.
Any thread may call it (the schema registry's opening is under `_registry_lock`; the rest of its state is
set up here and then only read, `_closed` aside, set once by `close`); its background threads are the
deadline reaper and, with sites, the replication schedule.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa

from lakelog.platform.broker.ends import LogEnds, TopicDescription
from lakelog.platform.broker.fetch import Fetcher
from lakelog.platform.broker.open_topic import OpenTopic
from lakelog.platform.broker.produce import Producing, parse_acks
from lakelog.platform.broker.seat import ClusterSeat
from lakelog.platform.broker.topics import OpenTopics, open_apart
from lakelog.platform.catalog.catalog import Catalog, TopicMeta, replaced
from lakelog.platform.catalog.topic_config import TopicConfig
from lakelog.platform.cluster import Membership
from lakelog.platform.cluster.errors import NodeUnavailable, NotInCluster
from lakelog.platform.cluster.forwarding import NodeClient
from lakelog.platform.cluster.ownership import topic_key
from lakelog.platform.cluster.reference import ProduceReference
from lakelog.platform.cluster.traffic import Traffic
from lakelog.platform.cluster.wire import ForwardedCall
from lakelog.platform.delta.outside_repair import RepairedPartition
from lakelog.platform.delta.table_retention import advertise_retention
from lakelog.platform.errors import InvalidRequest, OffsetOutOfRange, UnknownTopicOrPartition
from lakelog.platform.journal.node import NodeJournal
from lakelog.platform.layout import topic_path
from lakelog.platform.log import PartitionState, TopicLog
from lakelog.platform.records import FetchResult, ProducerBatch, ProduceResult, Record, RecordColumns
from lakelog.platform.replication import admin as replication_admin
from lakelog.platform.replication.manager import Election, ReplicaManager
from lakelog.platform.schema_registry.registry import SchemaRegistry
from lakelog.platform.storage import STORAGE_ERRORS, Storage
from lakelog.settings import CoreSettings, Settings

__all__ = ["Broker", "OpenTopic", "TopicDescription", "parse_acks"]

log = logging.getLogger(__name__)


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
        self.topic_deleted: list[Callable[[str], None]] = []  # told each topic this node deleted (groups' offsets)
        self.seat = ClusterSeat()  # this node's place in a cluster, once it serves in one (`join_cluster`)
        self.traffic = Traffic()  # produce bytes taken and forwarded (the metrics read them)
        self.committed = threading.Condition()  # notified after every table commit of this node
        self._fetcher = Fetcher(self.replicas, self.settings.refresh_interval_ms, self.committed)
        self._registry: SchemaRegistry | None = None  # the root's schema registry, opened on first use
        self._registry_lock = threading.Lock()
        self._closed = False
        opener = partial(OpenTopic, settings=self.settings, storage=self.storage, replicas=self.replicas,
                         committed=self.committed, schemas=self.schema_registry)
        self.journal = NodeJournal(self.storage, self.settings, self.committed,
                                   partial(open_apart, self.catalog, opener))
        self.open_topics = OpenTopics(self.catalog, opener, self.journal, lambda: self._closed)
        self._replication_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lakelog-replicate")
        topics = self.open_topics
        self.producing = Producing(topics.open, topics.check_partition, self.journal, self.replicas, self.seat,
                                   self.traffic, self.storage, self.settings, self._replication_pool)
        self.ends = LogEnds(topics.open, topics.check_partition, self.journal, self.seat)
        self._reaper = threading.Thread(target=self._expire_loop, name="lakelog-deadlines", daemon=True)
        self._reaper.start()
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
            self.journal.expire(time.monotonic())

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
        self.open_topics.forget_replaced()  # every node drops a deleted topic's table within a refresh (groups: 1 s)
        return self.catalog.list_topics()

    def alter_topic_config(self, name: str, changes: Mapping[str, Any]) -> TopicMeta:
        meta = self.catalog.alter_config(name, changes)
        self.open_topics.update_meta(meta)
        if "file.delete.delay.ms" in changes:  # the table advertises it as Delta's deleted-file retention
            advertise_retention(lambda: self.topic_log(name), meta.config.file_delete_delay_ms)
        return meta

    def add_partitions(self, name: str, total: int) -> TopicMeta:
        meta = self.catalog.add_partitions(name, total)
        self.open_topics.update_meta(meta)
        return meta

    def delete_topic(self, name: str) -> None:
        self.open_topics.delete(name)
        for told in self.topic_deleted:
            told(name)
        if self.replicas is not None:
            for storage in self.replicas.sites.values():
                try:
                    storage.delete_tree(storage.uri(topic_path(name)))
                except OSError:
                    log.warning("topic %s not deleted at %s (unreachable)", name, storage.root)

    def repair_topic(self, name: str) -> list[RepairedPartition]:
        """Remove the records another Delta writer appended beyond the topic's log ends, in one commit that
        lifts the partitions' refusal on every node loading it (outside_repair.py); [] when there are none."""
        return self.topic_log(name).repair_outside_appends()

    def topic(self, name: str) -> TopicMeta:
        return self._open(name).meta

    def topic_log(self, name: str) -> TopicLog:
        """The topic's table as this node has it (records acknowledged on the journal may not be in it yet)."""
        return self._open(name).log

    def committed_log(self, name: str) -> TopicLog:
        """The topic's table with every record this node acknowledged in it: its entries waiting on the journal
        committed now. For what reads or changes the table itself: sizes, timestamps, producers' state, deleted
        records, the maintenance jobs."""
        opened = self._open(name)
        self.journal.commit_topic(opened)
        return opened.log

    def _open(self, name: str) -> OpenTopic:
        return self.open_topics.open(name)

    def schema_registry(self) -> SchemaRegistry:
        """The root's schema registry (on the control site), its control table opened on first use: typed
        topics' flushes decode their values with it (typed/column.py)."""
        with self._registry_lock:
            if self._registry is None:
                self._registry = SchemaRegistry(self.storage)
            return self._registry

    # ---- produce (`Producing`) ------------------------------------------------------

    def produce_async(self, topic: str, records: Sequence[Record] | RecordColumns | pa.Table, acks: Any = 1,
                      timeout_ms: int | None = None, producer: ProducerBatch | None = None) -> Future:
        return self.producing.produce_async(topic, records, acks, timeout_ms, producer)

    def produce(self, topic: str, records: Sequence[Record] | pa.Table, acks: Any = 1,
                timeout_ms: int | None = None, producer: ProducerBatch | None = None) -> ProduceResult:
        return self.producing.produce(topic, records, acks, timeout_ms, producer)

    def produce_forwarded(self, topic: str, calls: Sequence[ForwardedCall]) -> list[Future]:
        return self.producing.produce_forwarded(topic, calls)

    def produce_by_reference(self, topic: str, reference: ProduceReference) -> list[Future]:
        return self.producing.produce_by_reference(topic, reference)

    def append_exactly_once(self, topic: str, records: pa.Table, app_id: str, version: int,
                            timeout_ms: int | None = None) -> ProduceResult | None:
        return self.producing.append_exactly_once(topic, records, app_id, version, timeout_ms)

    # ---- log ends (`LogEnds`) ----------------------------------------------------------

    def describe_topic(self, name: str) -> TopicDescription:
        return self.ends.describe_topic(name)

    def known_states(self, name: str, partitions: int | None = None) -> list[PartitionState]:
        return self.ends.known_states(name, partitions)

    def log_end_offsets(self, topic: str, relay: bool = True, taken: bool = False) -> list[int]:
        return self.ends.log_end_offsets(topic, relay, taken)

    def list_offset(self, topic: str, partition: int, spec: str | int) -> int:
        return self.ends.list_offset(topic, partition, spec)

    def last_stable_offset(self, topic: str, partition: int) -> int:
        return self.ends.last_stable_offset(topic, partition)

    def check_offset(self, topic: str, partition: int, offset: int) -> None:
        self.ends.check_offset(topic, partition, offset)

    def past_known_end(self, opened: OpenTopic, partition: int, offset: int) -> bool:
        return self.ends.past_known_end(opened, partition, offset)

    # ---- cluster ------------------------------------------------------------

    @property
    def cluster(self) -> Membership | None:
        """The cluster membership this node serves in (`join_cluster`), None outside a cluster."""
        return self.seat.cluster

    @cluster.setter
    def cluster(self, membership: Membership | None) -> None:
        self.seat.cluster = membership

    def join_cluster(self, membership: Membership, client: NodeClient) -> None:
        """Serve as one node of a cluster: topics led by other nodes have their produce calls forwarded by
        reference (forward objects an earlier run of this node left are deleted first)."""
        self.seat.join(membership, client, self.storage, self.journal.node)

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
        states = {}
        for name, _ in self.open_topics.items():
            if view is not None and not view.is_local(view.owner(topic_key(name))):
                continue
            try:
                partitions = self.catalog.get(name, refresh=False).partitions
            except UnknownTopicOrPartition:
                continue
            states[name] = self.ends.known_states(name, partitions)
        return states

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
        relay: bool = True,
    ) -> FetchResult:
        """Records from the first offset >= `offset`; waits up to `timeout_ms` for new data (long poll)
        until at least `min_bytes` of keys and values are there (Kafka's fetch.min.bytes).

        `site` (default: the node's `site` setting) prefers that site's replica when it is in sync.
        `relay`: with the journal on, a fetch at or past this node's table end on a topic another node leads
        is the leader's to answer (relay.py); the table answers when it does not.
        """
        if max_records < 1:
            raise InvalidRequest(f"max_records must be >= 1, got {max_records}")
        opened = self._open(topic)
        self.open_topics.check_partition(opened, partition)
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise InvalidRequest(f"offset must be an integer, got {offset!r}")
        leader = self.seat.remote_leader(topic)
        if leader is None and self.ends.past_known_end(opened, partition, offset):
            self.journal.take_for_reads(opened)  # the previous leader's acknowledged records: in the table first
        if relay and leader is not None and self.seat.leader_reads is not None \
                and offset >= opened.log.log_end_offset(partition):
            started = time.monotonic()
            relayed = self.seat.leader_reads.fetch(leader, topic, partition, offset, max_records, max_bytes,
                                               timeout_ms, min_bytes)
            if relayed is not None:
                return relayed
            timeout_ms = max(timeout_ms - int((time.monotonic() - started) * 1000), 0)
        try:
            return self._fetcher.fetch(opened, partition, offset, max_records, max_bytes, timeout_ms,
                                       site or self.settings.site, min_bytes, lambda: self._closed,
                                       led_elsewhere=leader is not None)
        except STORAGE_ERRORS:  # the table deleted under the read (this node's delete, or another's)?
            self.catalog.refresh()
            if replaced(opened.meta, self.catalog.known(topic)):
                raise UnknownTopicOrPartition(f"unknown topic {topic!r}: it was deleted") from None
            raise
        except OffsetOutOfRange as exc:
            if leader is None:  # the end this node knows: past its acknowledged records
                start, end = self.ends.known_range(opened, partition)
                raise OffsetOutOfRange(f"offset {offset} is out of range for {topic}-{partition}: log start {start}, "
                                       f"log end {end}", start, end) from None
            if offset < exc.log_start_offset:
                raise
            raise NodeUnavailable(f"{topic}-{partition} at {offset}: past this node's table, and its leader "
                                  f"({leader.node_id}) did not answer; retry") from None

    def wait_for_commit(self, timeout_s: float) -> None:
        """Block until a topic of this node commits, or `timeout_s` passes (long polls over many topics)."""
        with self.committed:
            self.committed.wait(max(timeout_s, 0))

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
        manager = self.replicas

        def elect(waiting: list) -> Election:  # the journal's entries still waiting must fit the chosen site
            return manager.elect(topic, site, unclean, lambda chosen: self.journal.check_fits(
                TopicLog(manager.sites[chosen], topic), waiting))

        return self.journal.elect(self._open(topic), elect, lambda: self.open_topics.drop(topic))

    def replica_report(self, topic: str) -> dict:
        """Leader, in-sync set and the lag of each follower, per site and per partition."""
        if self.replicas is None:
            raise InvalidRequest("no sites configured: the topic has one replica")
        meta = self.topic(topic)
        leader_log = self._open(topic).log
        leader_log.refresh()
        return replication_admin.report(self.replicas, topic, meta.partitions, leader_log)

    # ---- lifecycle ----------------------------------------------------------

    def flush(self) -> None:
        """Wait until everything queued so far is acknowledged, and committed to its table."""
        self.journal.flush()

    def close(self) -> None:
        """Stop taking produce calls, commit what is pending, release the topics."""
        if self._closed:
            return
        self._closed = True
        self.journal.close()  # every acknowledged record committed to its table before the topics go
        self.open_topics.close()
        self._replication_pool.shutdown(wait=True)
        self.catalog.close()
        self.seat.close()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

