"""Read-only access to a root's topics: the catalog and one `TopicLog` per topic, with no writer threads,
no deadline reaper and no producer state. For processes that only read, such as the Spark source's
planner and its executors, which would otherwise start a broker (and a flush thread per topic read).
"""

from __future__ import annotations

import threading

from lakelog.platform.catalog.catalog import Catalog, TopicMeta
from lakelog.platform.errors import UnknownTopicOrPartition
from lakelog.platform.log import TopicLog
from lakelog.platform.storage import Storage


class TopicReader:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.catalog = Catalog(storage)
        self._logs: dict[str, TopicLog] = {}
        self._lock = threading.Lock()

    def list_topics(self) -> list[TopicMeta]:
        self.catalog.refresh()
        return self.catalog.list_topics()

    def topic(self, name: str) -> TopicMeta:
        return self.catalog.get(name)

    def topic_log(self, name: str) -> TopicLog:
        with self._lock:
            opened = self._logs.get(name)
        if opened is None:
            self.topic(name)  # an unknown topic is UNKNOWN_TOPIC_OR_PARTITION, not a missing table
            opened = TopicLog(self.storage, name)
            with self._lock:
                opened = self._logs.setdefault(name, opened)
        return opened

    def list_offset(self, topic: str, partition: int, spec: str | int) -> int:
        """As `Broker.list_offset`: `earliest`, `latest`, or the first offset at or after a timestamp (ms)."""
        meta = self.topic(topic)
        if not 0 <= partition < meta.partitions:
            raise UnknownTopicOrPartition(f"unknown partition {partition} of topic {topic!r}")
        topic_log = self.topic_log(topic)
        topic_log.refresh()
        if spec == "latest":  # read committed: never past an open transaction's offsets, filled in later
            return topic_log.last_stable_offset(partition)
        return topic_log.offset_for(partition, spec)

    def close(self) -> None:
        """Nothing to stop: no threads were started."""
