"""The per-topic machinery a node holds open: log, admission, partitioner, producer state, forwarders.

Owns `OpenTopic` only; the broker opens one per topic on first use (under its lock) and closes it, and
the fetch path (`fetch.py`) reads through it. Built from the parts it needs, so that neither the broker
nor the fetcher is imported here. Opening one does storage I/O (the replica state, the log's snapshot):
any thread of the broker's callers may open, read or close it. It has no thread of its own: the node
journal's flush thread writes every topic (journal/writer.py).
"""

from __future__ import annotations

import threading
from typing import Callable

from lakelog.platform.catalog.catalog import TopicMeta
from lakelog.platform.cluster.forwarding import TopicForwarder
from lakelog.platform.journal.topic_state import JournalTopic
from lakelog.platform.log import TopicLog
from lakelog.platform.partitioner import Partitioner
from lakelog.platform.produce.admission import ProducerAdmission
from lakelog.platform.produce.producer_state import ProducerStateManager
from lakelog.platform.replication.manager import ReplicaManager
from lakelog.platform.schema_registry.registry import SchemaRegistry
from lakelog.platform.storage import Storage
from lakelog.platform.typed.column import TypedColumn
from lakelog.settings import CoreSettings


class OpenTopic:
    """The per-topic machinery of a node: log, admission, partitioner, producer state, forwarders."""

    def __init__(self, meta: TopicMeta, settings: CoreSettings, storage: Storage, replicas: ReplicaManager | None,
                 committed: threading.Condition, schemas: Callable[[], SchemaRegistry] | None = None) -> None:
        """`storage`: the node's (control site's) storage; `replicas`: the sites, when configured;
        `committed`: the node's commit notification (`notify_committed`); `schemas`: the root's schema
        registry (a typed topic's flushes write its `value_typed` column with it)."""
        self.meta = meta
        self.replica_state = replicas.require_state(meta.name, refresh=True) if replicas else None
        epoch = None
        if replicas is not None and self.replica_state is not None:  # write only to the current leader, with its epoch
            storage, epoch = replicas.sites[self.replica_state.leader], self.replica_state.leader_epoch
        self.log = TopicLog(storage, meta.name, settings.tail_cache_bytes, leader_epoch=epoch)
        if schemas is not None:
            self.log.typed_column = TypedColumn(meta.name, schemas, lambda: self.meta.config)
        self.site_logs: dict[str, TopicLog] = {}
        self.partitioner = Partitioner(meta.config.partitioner)
        self.producers = ProducerStateManager(self.log.producer_history)
        self.admission = ProducerAdmission(self.log, self.producers)
        self.committed = committed
        self.forwarders: dict[str, TopicForwarder] = {}  # node id -> calls on their way to that leader
        self.journal: JournalTopic = JournalTopic(meta.name, self.log.log_end_offset)  # acknowledged, not in the table

    def notify_committed(self) -> None:
        """Wake the long polls of this node: records reached the table."""
        with self.committed:
            self.committed.notify_all()

    def close(self) -> None:
        for forwarder in list(self.forwarders.values()):
            forwarder.close()
        self.log.close()

    def abandon(self) -> None:
        """Close a topic whose table is no longer the topic's (deleted, or the name created again): nothing
        more is committed or checkpointed to it (the node journal drops its entries: `NodeJournal.forget_topic`)."""
        self.log.abandoned = True
        self.close()
