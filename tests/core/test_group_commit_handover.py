"""A partition handed to a new owner starts at the old owner's last accepted commit, even when that commit
was still on its way to storage at the rebalance: the new owner's first poll waits for it. Otherwise the
new owner re-reads from an older offset and its next commit moves the group's offset backwards (found by
the cluster's rolling-restart test)."""

from __future__ import annotations

import threading

from lakelog.platform import Broker, Record
from lakelog.platform.groups import GroupCoordinator, JoinOptions
from lakelog.platform.records import FetchResult
from log_check import assert_topic_intact


def test_a_new_owner_starts_at_a_commit_accepted_before_the_rebalance(tmp_path) -> None:
    root = str(tmp_path / "data")
    with Broker(root=root) as broker:
        broker.create_topic("t", 1)
        broker.produce("t", [Record(f"v{i}".encode()) for i in range(20)])
        coordinator = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        writes = coordinator.store._writes
        write, gate = writes._handle, threading.Event()
        writes._handle = lambda batch: (gate.wait(30), write(batch))  # storage is slow to take the commit
        try:
            options = JoinOptions(topics=("t",), auto_offset_reset="earliest", enable_auto_commit=False)
            old, generation = coordinator.join("g", options)
            coordinator.heartbeat("g", old)
            read = coordinator.poll("g", old, max_records=10).results
            assert offsets(read) == list(range(10))
            accepted = coordinator.commit("g", old, generation, [("t", 0, 10, None)])
            assert not accepted.done()

            new, _ = coordinator.join("g", options)
            coordinator.leave("g", old)  # the partition is the new member's now
            assert coordinator.heartbeat("g", new).assignment == [("t", 0)]
            first: list[int] = []
            poller = threading.Thread(target=lambda: first.extend(offsets(coordinator.poll("g", new, max_records=5).results)))
            poller.start()
            poller.join(0.5)
            assert poller.is_alive(), "the new owner read before the old owner's commit was durable"
            gate.set()
            poller.join(30)
            assert accepted.result(10) is None
            assert first == [10, 11, 12, 13, 14]
        finally:
            gate.set()
            coordinator.close()
    assert_topic_intact(root, "t")


def offsets(results: list[FetchResult]) -> list[int]:
    return [o for result in results for o in result.records.column("offset").to_pylist()]
