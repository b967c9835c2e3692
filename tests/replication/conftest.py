from __future__ import annotations

from typing import Callable, Iterator

import pytest

from lakelog.platform import Broker
from lakelog.settings import Settings


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
        for topic in list(broker._topics.values()):
            topic.writer.close(timeout=5)
