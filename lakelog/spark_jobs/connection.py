"""Connection options of the data source and the jobs: `lakelog.root` and `lakelog.storage.<option>`.

As Spark's Kafka source takes `kafka.bootstrap.servers`, lakelog takes its
root URI and storage options under a `lakelog.` prefix. Python workers are
separate processes, so everything they need travels in these options.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lakelog.platform import Broker, Storage
from lakelog.platform.broker.reader import TopicReader
from lakelog.platform.errors import InvalidConfig
from lakelog.platform.records import TopicPartition
from lakelog.settings import Settings, own_journal

ROOT_OPTION = "lakelog.root"
STORAGE_PREFIX = "lakelog.storage."

_storages: dict[tuple, Storage] = {}
_planning: dict[tuple, tuple[TopicReader, dict[str, int]]] = {}  # reader, and each topic's creation time it knew
_lock = threading.Lock()


@dataclass(frozen=True)
class Connection:
    root: str
    storage_options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Connection:
        lowered = {str(k).lower(): str(v) for k, v in options.items()}
        root = lowered.get(ROOT_OPTION)
        if not root:
            raise InvalidConfig(f"option {ROOT_OPTION!r} is required: the lakelog root URI (a folder or s3://...)")
        storage = {k[len(STORAGE_PREFIX):]: v for k, v in lowered.items() if k.startswith(STORAGE_PREFIX)}
        return cls(root, storage)

    def _key(self) -> tuple:
        return self.root, tuple(sorted(self.storage_options.items()))

    def storage(self) -> Storage:
        """One Storage per process and connection: Python workers are reused across tasks."""
        key = self._key()
        with _lock:
            opened = _storages.get(key)
            if opened is None:
                opened = _storages[key] = Storage.open(self.root, self.storage_options)
            return opened

    def broker(self) -> Broker:
        """A full broker, for the sink and the jobs, which write (with a journal folder of this process's)."""
        return Broker(own_journal(Settings(root=self.root, storage=dict(self.storage_options)), "spark"))

    def reader(self) -> TopicReader:
        """Read-only access for the source: no writer threads."""
        return TopicReader(self.storage())

    def planning_reader(self, resolve: Callable[[TopicReader], list[TopicPartition]]
                        ) -> tuple[TopicReader, list[TopicPartition]]:
        """A reader kept for this process and connection, caught up with every topic `resolve` answers
        (it lists the topics), and those topic-partitions: for planning batch reads.

        Spark's planner workers are reused across queries; a new reader loads the catalog's table and each
        topic's table from its Delta log again (65 ms a query for one topic, measured), where a kept one
        catches up with one GET a table when nothing is new. A topic deleted and created again has a new
        table: then the reader is a new one too.
        """
        key = self._key()
        with _lock:
            kept = _planning.get(key)
        reader, created = kept if kept is not None else (self.reader(), {})
        tps = resolve(reader)
        seen = {t: reader.topic(t).created_ms for t in sorted({t for t, _ in tps})}
        if any(created.get(t, ms) != ms for t, ms in seen.items()):
            reader, created = self.reader(), {}
            tps = resolve(reader)
            seen = {t: reader.topic(t).created_ms for t in sorted({t for t, _ in tps})}
        for topic in seen:
            reader.topic_log(topic).refresh()
        with _lock:
            _planning[key] = (reader, {**created, **seen})
        return reader, tps
