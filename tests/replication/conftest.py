from __future__ import annotations

import hashlib
from typing import Callable, Iterator

import pytest

from lakelog.platform import Broker, Storage
from lakelog.platform.delta.delta_log import added_paths, commit_uri, versions
from lakelog.platform.layout import topic_path
from lakelog.settings import Settings


def fingerprint(storage: Storage, topic: str) -> tuple:
    """A topic table at one site, as (version, sha256) of its commits and (path, sha256) of its data files."""
    table = storage.uri(topic_path(topic))
    commits, files = [], {}
    for version in versions(storage, table):
        data = storage.read_bytes(commit_uri(table, version))
        commits.append((version, hashlib.sha256(data).hexdigest()))
        for path in added_paths(data):
            files[path] = hashlib.sha256(storage.read_bytes(f"{table}/{path}")).hexdigest()
    return tuple(commits), tuple(sorted(files.items()))


@pytest.fixture
def table_fingerprint() -> Callable[[Storage, str], tuple]:
    return fingerprint


@pytest.fixture
def make_replicated(tmp_path) -> Iterator[Callable[..., Broker]]:
    """Brokers over named sites; `sites` maps a name to a root URI (local folder or S3 endpoint)."""
    opened: list[Broker] = []

    def factory(sites: dict[str, str], site_storage: dict | None = None, **overrides: object) -> Broker:
        settings = Settings(root=str(tmp_path / "unused"), sites=sites, site_storage=site_storage or {},
                            control_site=next(iter(sites)), linger_ms=2, replication_interval_ms=0,
                            **overrides)
        broker = Broker(settings)
        opened.append(broker)
        return broker

    yield factory
    for broker in opened:
        broker._closed = True  # sites may be gone: do not wait on them
        broker.journal.writer.close(timeout=5)  # its flush thread; table commits to gone sites are not waited for
