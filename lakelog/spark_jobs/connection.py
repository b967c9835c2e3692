"""Connection options of the data source and the jobs: `lakelog.root` and `lakelog.storage.<option>`.

As Spark's Kafka source takes `kafka.bootstrap.servers`, lakelog takes its
root URI and storage options under a `lakelog.` prefix. Python workers are
separate processes, so everything they need travels in these options.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from lakelog.platform import Broker, Storage
from lakelog.platform.broker.reader import TopicReader
from lakelog.platform.errors import InvalidConfig
from lakelog.settings import Settings, own_journal

ROOT_OPTION = "lakelog.root"
STORAGE_PREFIX = "lakelog.storage."

_storages: dict[tuple, Storage] = {}
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

    def storage(self) -> Storage:
        """One Storage per process and connection: Python workers are reused across tasks."""
        key = (self.root, tuple(sorted(self.storage_options.items())))
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
