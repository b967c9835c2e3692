"""`_control/consumer_groups` (consumer_store.py's `ConsumerGroupStore`): states written from two stores on
one root, the latest per group read back by a third, a batch's last state of a group winning; a store whose
node's cluster membership lapsed writes nothing and says so (NOT_COORDINATOR)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakelog.platform.cluster.errors import NotCoordinator
from lakelog.platform.groups.consumer_store import ConsumerGroupStore
from lakelog.platform.storage import Storage


def test_the_latest_state_per_group_wins(tmp_path: Path) -> None:
    storage = Storage.open(str(tmp_path / "root"))
    first, second = ConsumerGroupStore(storage), ConsumerGroupStore(storage)
    try:
        assert first.load() == {}
        futures = [first.submit("g", f'{{"n":{i}}}') for i in range(5)] + [first.submit("h", "h1")]
        for future in futures:
            future.result(30)
        assert first.in_flight("g") == [] and first.in_flight("h") == []  # all durable
        second.load()  # the second store's stamps follow the first's
        second.submit("g", "from-second").result(30)
        third = ConsumerGroupStore(storage)
        assert third.load() == {"g": "from-second", "h": "h1"}
        third.close()
    finally:
        first.close()
        second.close()


def test_a_lapsed_node_writes_nothing(tmp_path: Path) -> None:
    storage = Storage.open(str(tmp_path / "root"))
    lapsed = ConsumerGroupStore(storage, current=lambda: False)
    try:
        with pytest.raises(NotCoordinator):
            lapsed.submit("g", "stale").result(30)
        assert lapsed.load() == {}
    finally:
        lapsed.close()
