"""The broker's set of open topics: one `OpenTopic` (one DeltaTable) per topic, opened on first use and
attached to the node journal, dropped when the catalog says its table is no longer the topic's (deleted,
or the name created again), refused while this node deletes it.

Owns `OpenTopics`, and `open_apart` (a topic's machinery outside the set: the journal's replay at start).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Sequence

from lakelog.platform.broker.open_topic import OpenTopic
from lakelog.platform.catalog.catalog import Catalog, TopicMeta, replaced
from lakelog.platform.errors import BrokerClosed, UnknownTopicOrPartition
from lakelog.platform.journal.node import NodeJournal
from lakelog.platform.storage import STORAGE_ERRORS

log = logging.getLogger("lakelog.platform.broker.node")  # the broker's one logger, whichever part logs

Opener = Callable[[TopicMeta], OpenTopic]  # a topic's machinery, built from the node's parts


class OpenTopics:
    """The topics this node has open, by name.

    Thread contract: any thread may call it (the broker's callers, the journal's threads through the
    broker). The set of open topics and the names being deleted are under `_lock` (an RLock), held while
    a topic is opened (its storage I/O included, so that a topic is opened once); the catalog's reads and
    the closing of dropped topics happen outside it. `closed` tells when the broker closed: nothing is
    opened then.
    """

    def __init__(self, catalog: Catalog, opener: Opener, journal: NodeJournal, closed: Callable[[], bool]) -> None:
        self._catalog = catalog
        self._opener = opener
        self._journal = journal
        self._closed = closed
        self._lock = threading.RLock()
        self._topics: dict[str, OpenTopic] = {}
        self._deleting: set[str] = set()  # topics this node is deleting: not opened again meanwhile

    def open(self, name: str) -> OpenTopic:
        if self._closed():
            raise BrokerClosed("the broker is closed")
        with self._lock:
            opened = self._topics.get(name)
        if opened is not None and not replaced(opened.meta, self._catalog.known(name)):
            return opened
        if opened is not None:
            self.forget_replaced([opened])
        meta = self._catalog.get(name)
        with self._lock:
            opened = self._topics.get(name)
            if opened is None:
                if name in self._deleting:  # a table being deleted is not opened again
                    raise UnknownTopicOrPartition(f"unknown topic {name!r}: it is being deleted")
                try:
                    opened = self._opener(meta)
                except STORAGE_ERRORS:  # its table went with a delete another node made meanwhile?
                    self._catalog.refresh()
                    if replaced(meta, self._catalog.known(name)):
                        raise UnknownTopicOrPartition(f"unknown topic {name!r}: it was deleted") from None
                    raise
                self._topics[name] = opened
                self._journal.attach(opened)
            return opened

    def update_meta(self, meta: TopicMeta, opened: OpenTopic | None = None) -> None:
        """An opened topic's meta moves only forward (by the catalog's revision, one per change): two
        changes made at once on this node may answer in either order (a partition count never shrinks)."""
        with self._lock:
            opened = opened or self._topics.get(meta.name)
            if opened is not None and meta.revision >= opened.meta.revision and not replaced(opened.meta, meta):
                opened.meta = meta

    def check_partition(self, topic: OpenTopic, partition: int) -> None:
        """UnknownTopicOrPartition unless `partition` is one of the topic's (the catalog read again first:
        partitions may have been added by another node)."""
        if not isinstance(partition, int) or not 0 <= partition < topic.meta.partitions:
            self._catalog.refresh()  # partitions may have been added by another node
            self.update_meta(self._catalog.get(topic.meta.name), topic)
            meta = topic.meta
            if not isinstance(partition, int) or not 0 <= partition < meta.partitions:
                raise UnknownTopicOrPartition(
                    f"unknown partition {partition!r} of topic {meta.name!r} (partitions 0..{meta.partitions - 1})"
                )

    def forget_replaced(self, candidates: Sequence[OpenTopic] | None = None) -> None:
        """Drop the open topics (all: None) whose table is no longer their topic's in the catalog: deleted, or
        the name created again (another node's delete, seen with the catalog's next refresh). Nothing more is
        committed or checkpointed to such a table: its waiting calls are answered UNKNOWN_TOPIC_OR_PARTITION."""
        with self._lock:
            stale = [o for o in (self._topics.values() if candidates is None else candidates)
                     if self._topics.get(o.meta.name) is o and replaced(o.meta, self._catalog.known(o.meta.name))]
            for opened in stale:
                del self._topics[opened.meta.name]
        for opened in stale:
            log.info("topic %s was deleted or created again: its former table is closed here", opened.meta.name)
            self._journal.forget_topic(opened)
            opened.abandon()

    def delete(self, name: str) -> None:
        """Close the topic here (its journal entries dropped) and delete it from the catalog; it is not
        opened again meanwhile."""
        with self._lock:
            opened = self._topics.pop(name, None)
            self._deleting.add(name)
        try:
            if opened is not None:
                self._journal.forget_topic(opened)
                opened.close()
            self._catalog.delete_topic(name)
        finally:
            with self._lock:
                self._deleting.discard(name)

    def drop(self, name: str) -> None:
        """Drop a topic's machinery so that its next use opens on the current leader (the journal handed
        its waiting entries over: `NodeJournal.elect`)."""
        with self._lock:
            self._topics.pop(name, None)

    def items(self) -> list[tuple[str, OpenTopic]]:
        """The open topics now, by name (a copy)."""
        with self._lock:
            return list(self._topics.items())

    def close(self) -> None:
        """Release every open topic (the journal committed their acknowledged records first)."""
        with self._lock:
            topics = list(self._topics.values())
            self._topics.clear()
        for opened in topics:
            opened.close()


def open_apart(catalog: Catalog, opener: Opener, name: str) -> OpenTopic | None:
    """A topic's machinery outside the broker's set (the journal's replay at start), None if no such topic."""
    try:
        meta = catalog.get(name)
    except UnknownTopicOrPartition:
        return None
    return opener(meta)
