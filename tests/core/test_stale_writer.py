"""A writer whose snapshot fell far behind must not commit at a version whose commit file the log
cleanup deleted: put-if-absent would take it, and the records it acknowledged there would be invisible to
every reader (they start from a later checkpoint). The rolling-restart test found it: a node that led a
topic again after a long time committed at versions cleaned under it."""

from __future__ import annotations

import time

import pytest

from lakelog.platform import Broker, Record
from lakelog.platform import log as log_module
from lakelog.platform.log import checkpoints, snapshot
from lakelog.settings import Settings
from log_check import assert_topic_intact


def test_a_stale_writer_catches_up_before_it_commits(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoints, "CLEANUP_DELAY_S", 0.0)  # the cleanup as soon as it may run
    monkeypatch.setattr(snapshot, "SNAPSHOT_MAX_AGE_S", 0.2)
    root = str(tmp_path / "data")
    with Broker(Settings(root=root, linger_ms=0)) as active, Broker(Settings(root=root, linger_ms=0)) as stale:
        active.create_topic("t", 2)
        stale.produce("t", [Record(b"stale-0", partition=0)])  # the stale node's snapshot: version 1
        for i in range(log_module.RETAINED_COMMITS + 3 * log_module.CHECKPOINT_INTERVAL):
            active.produce("t", [Record(f"active-{i}".encode(), partition=i % 2)])
        active.topic_log("t").close()  # the last background checkpoint and cleanup are done
        assert not (tmp_path / "data" / "topics" / "t" / "_delta_log" / "00000000000000000002.json").exists()
        time.sleep(0.3)
        stale.produce("t", [Record(b"stale-1", partition=0)])
        assert stale.topic_log("t").version > log_module.RETAINED_COMMITS  # not a version the cleanup deleted
        active.topic_log("t").refresh()  # the other writer's commit
        values = [r.value for r in active.fetch("t", 0, 0, max_records=10_000)]
    assert values[0] == b"stale-0" and values[-1] == b"stale-1"
    assert_topic_intact(root, "t")
