"""The topic log's collaborators, each made alone with only what it needs: the producers other writers wrote
(`OtherWriters`), and the snapshot following another writer's commit and applying this node's own
(`LogSnapshot`)."""

from __future__ import annotations

import threading
import uuid

import pytest
from deltalake.transaction import Transaction

from lakelog.platform.log.tail_cache import TailCache
from lakelog.platform.delta.checkpoint import CheckpointState
from lakelog.platform.delta.delta_log import COMMIT_ID, PRODUCER_IDS, commit_uri, encode_commit
from lakelog.platform.delta.outside_commits import OutsideWatch
from lakelog.platform.errors import ProducerStateChanged
from lakelog.platform.layout import topic_path
from lakelog.platform.log import TopicLog, partition_app_id
from lakelog.platform.log.producers import FOREIGN_VERSIONS_MAX, OtherWriters
from lakelog.platform.log.read import Footers
from lakelog.platform.log.snapshot import LogSnapshot
from lakelog.platform.segments.file_slices import FileSlices
from lakelog.platform.storage import Storage


def commit(storage: Storage, uri: str, version: int, producers: list[int], ends: dict[int, int]) -> None:
    """Another writer's append at `version`: no files, the partitions' log ends moved, producers named."""
    txns = [Transaction(partition_app_id(p), end) for p, end in ends.items()]
    data = encode_commit([], txns, {COMMIT_ID: uuid.uuid4().hex, PRODUCER_IDS: producers}, None)
    assert storage.put_if_absent(commit_uri(uri, version), data)


def test_other_writers_producers_are_read_once_and_taken(tmp_path) -> None:
    storage = Storage.open(str(tmp_path))
    uri = storage.uri(topic_path("t"))
    commit(storage, uri, 1, [5], {0: 1})
    commit(storage, uri, 2, [6], {0: 2})
    others = OtherWriters(storage, uri, "t", threading.RLock())
    assert others.check(frozenset({5})) is None  # nothing noted yet: nothing to read
    others.note_versions(0, 2)
    assert others.check(frozenset({9})) is None  # versions 1 and 2 read: neither wrote producer 9
    with pytest.raises(ProducerStateChanged):
        others.check(frozenset({5, 9}))
    assert others.take_changed() == {5, 6}
    assert others.take_changed() == set()
    others.note_versions(2, 3 + FOREIGN_VERSIONS_MAX)  # too many to read: any producer may have changed
    assert others.take_changed() is None


def test_the_snapshot_follows_another_writer_and_applies_its_own_commits(tmp_path) -> None:
    storage = Storage.open(str(tmp_path))
    TopicLog.create_table(storage, "t")
    uri = storage.uri(topic_path("t"))
    lock = threading.RLock()
    slices = FileSlices(storage, uri, "t", lock, Footers().remember)
    others = OtherWriters(storage, uri, "t", lock)
    state = CheckpointState(keep=100)
    snapshot = LogSnapshot(storage, uri, "t", lock, slices, OutsideWatch("t", storage, uri, slices.read),
                           TailCache(0), state, others)
    assert (snapshot.version, snapshot.opened_at, snapshot.log_end_offset(0)) == (0, 0, 0)

    commit(storage, uri, 1, [7], {0: 3, 1: 2})
    assert snapshot.refresh()  # followed: the commit applied without loading the table through delta-rs
    assert (snapshot.version, snapshot.log_end_offset(0), snapshot.log_end_offset(1)) == (1, 3, 2)
    assert snapshot.delta_table.version() == 0
    assert others.take_changed() == {7}

    snapshot.apply_commit(2, [], [], [Transaction(partition_app_id(0), 5)], ours=True)
    assert (snapshot.version, snapshot.log_end_offset(0), snapshot.log_end_offset(1)) == (2, 5, 2)
    assert not snapshot.refresh()  # version 3 is free: nothing new
