"""A fetch never answers from a later file when the segment index holds no file for the offset asked: that
would move a reader past records it never saw. The log is refreshed, and nothing is answered while the hole
stays (files cover a partition's offsets without gaps: the roll and compaction keep each file's range)."""

from __future__ import annotations

from lakelog.platform import Broker, Record
from lakelog.platform.segments.index import SegmentIndex
from log_check import assert_topic_intact


def three_files_and_an_index_without_the_middle_one(broker: Broker) -> None:
    broker.create_topic("t", 1)
    for batch in ([b"a", b"b"], [b"c"], [b"d"]):  # offsets 0-1, 2, 3
        broker.produce("t", [Record(v) for v in batch])
    topic_log = broker.topic_log("t")
    first, _, last = topic_log.segments(0)
    topic_log.snapshot._index = SegmentIndex([first, last])  # as a bug could leave it


def values(table) -> list[bytes]:  # type: ignore[no-untyped-def]
    return table.column("value").to_pylist()


def test_a_hole_in_the_index_is_refreshed_away(tmp_path) -> None:
    root = str(tmp_path / "data")
    with Broker(root=root, tail_cache_bytes=0) as broker:
        three_files_and_an_index_without_the_middle_one(broker)
        assert values(broker.topic_log("t").read(0, 1, 10)) == [b"b"]  # the first file: no hole yet
        assert values(broker.topic_log("t").read(0, 2, 10)) == [b"c", b"d"]
    assert_topic_intact(root, "t")


def test_a_hole_that_stays_answers_nothing(tmp_path, monkeypatch) -> None:
    with Broker(root=str(tmp_path / "data"), tail_cache_bytes=0) as broker:
        three_files_and_an_index_without_the_middle_one(broker)
        topic_log = broker.topic_log("t")
        monkeypatch.setattr(topic_log.snapshot, "refresh", lambda full=False: False)
        assert values(topic_log.read(0, 2, 10)) == []  # not [b"d"]: no file indexed holds offset 2
        assert values(topic_log.read(0, 3, 10)) == [b"d"]
