"""A refresh that follows the log reads the next commit file outside the log's lock: on the node leading
a topic, a consumer at the end of a partition refreshes every 100 ms, and a produce commit must not wait a
round trip behind that read. What the refresh read is applied only if it is still the next version."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.storage import Storage
from lakelog.settings import Settings
from log_check import assert_topic_intact

WAIT_S = 20  # for the held read to be reached, and for the commit that must not wait for it


def test_a_commit_does_not_wait_for_a_refresh_reading_the_next_commit(tmp_path, monkeypatch: pytest.MonkeyPatch
                                                                       ) -> None:
    root = str(tmp_path / "data")
    with Broker(Settings(root=root, linger_ms=0)) as node, Broker(Settings(root=root, linger_ms=0)) as other:
        node.create_topic("t", 2)
        node.produce("t", [Record(b"first", partition=0)])
        topic_log = node.topic_log("t")
        read_version = topic_log.version + 1
        reading, release = threading.Event(), threading.Event()
        refresher: list[threading.Thread] = []
        read_bytes = Storage.read_bytes

        def held_read(storage: Storage, uri: str) -> bytes:
            if refresher and threading.current_thread() is refresher[0] and not release.is_set():
                reading.set()
                release.wait(WAIT_S)
            return read_bytes(storage, uri)

        monkeypatch.setattr(Storage, "read_bytes", held_read)
        with ThreadPoolExecutor(1) as refreshing, ThreadPoolExecutor(1) as producing:
            def refresh() -> bool:
                refresher.append(threading.current_thread())
                return topic_log.refresh()

            refreshed = refreshing.submit(refresh)
            assert reading.wait(WAIT_S), "the refresh never read the next commit"
            produced = producing.submit(node.produce, "t", [Record(b"while-reading", partition=0)])
            try:
                acked = produced.result(WAIT_S)  # the refresh's read is still held
            finally:
                release.set()
            assert acked.offsets.tolist() == [1]
            assert topic_log.version == read_version  # our commit took the version the refresh was reading
            assert refreshed.result(WAIT_S) is False  # it read our own commit: not applied twice, nothing new
        assert topic_log.version == read_version

        other.produce("t", [Record(b"elsewhere", partition=1)])
        assert topic_log.refresh() is True
        assert [r.value for r in node.fetch("t", 0, 0)] == [b"first", b"while-reading"]
        assert [r.value for r in node.fetch("t", 1, 0)] == [b"elsewhere"]
    assert_topic_intact(root, "t")
