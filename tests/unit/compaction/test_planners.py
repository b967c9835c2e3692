"""compaction.planners: retention, roll and compaction plans from file statistics alone."""

from __future__ import annotations

from dataclasses import replace

from lakelog.compaction.planners import plan_log_compaction, plan_retention, plan_segment_roll
from lakelog.platform.catalog.catalog import TopicMeta
from lakelog.platform.segments.index import SegmentFile
from lakelog.platform.catalog.topic_config import parse_topic_config

NOW = 10_000_000


def files(partition: int, *specs: tuple[int, int, int]) -> list[SegmentFile]:
    """(records, bytes, newest timestamp) per file, offsets consecutive from 0."""
    out, offset = [], 0
    for i, (records, size, newest) in enumerate(specs):
        out.append(SegmentFile(f"partition={partition}/f{i}.parquet", partition, size, records, offset,
                               offset + records - 1, newest - 1, newest, modification_time_ms=newest))
        offset += records
    return out


def meta(partitions: int, **config: object) -> TopicMeta:
    return TopicMeta("t", partitions, parse_topic_config(config), 0, 0, 0)


def test_retention_by_time_removes_an_old_prefix_never_the_active_segment() -> None:
    segs = {0: files(0, (10, 100, NOW - 5000), (10, 100, NOW - 4000), (10, 100, NOW - 100), (10, 100, NOW - 9000))}
    plans = plan_retention(meta(1, **{"retention.ms": 3000}), segs.__getitem__, NOW)
    assert [f.path for f in plans[0].inputs] == ["partition=0/f0.parquet", "partition=0/f1.parquet"]
    # f3 is old too, but the active segment (highest offsets) is never removed; f2 stops the prefix


def test_retention_by_bytes_per_partition() -> None:
    segs = {0: files(0, (1, 400, NOW), (1, 400, NOW), (1, 400, NOW))}
    plans = plan_retention(meta(1, **{"retention.bytes": 900}), segs.__getitem__, NOW)
    assert [f.path for f in plans[0].inputs] == ["partition=0/f0.parquet"]


def test_the_topic_wide_cap_removes_the_globally_oldest_closed_segment() -> None:
    segs = {0: files(0, (1, 500, NOW - 10), (1, 500, NOW)), 1: files(1, (1, 500, NOW - 99), (1, 500, NOW))}
    plans = plan_retention(meta(2, **{"retention.topic.bytes": 1600}), segs.__getitem__, NOW)
    assert [(p.partition, [f.path for f in p.inputs]) for p in plans] == [(1, ["partition=1/f0.parquet"])]


def test_no_retention_plans_under_compact_only() -> None:
    segs = {0: files(0, (1, 500, 0), (1, 500, 0))}
    assert plan_retention(meta(1, **{"cleanup.policy": "compact", "retention.ms": 1}), segs.__getitem__, NOW) == []


def test_roll_merges_runs_of_small_files_into_segments() -> None:
    segs = {0: files(0, *[(1, 30, NOW)] * 7)}
    plans = plan_segment_roll(meta(1, **{"segment.bytes": 100}), segs.__getitem__, NOW)
    # 4 x 30 bytes reach segment.bytes; the 3 files after them are young and under it: they wait
    assert [len(g) for g in plans[0].groups] == [4]
    aged = plan_segment_roll(meta(1, **{"segment.bytes": 100, "segment.ms": 1000}), segs.__getitem__, NOW + 1000)
    assert [len(g) for g in aged[0].groups] == [4, 3]  # segment.ms old: rolled whatever their size


def test_compaction_covers_only_closed_segments_past_the_lag() -> None:
    segs = {0: files(0, (5, 100, NOW - 5000), (5, 100, NOW - 10), (5, 100, NOW - 9000))}
    plans = plan_log_compaction(meta(1, **{"cleanup.policy": "compact", "min.compaction.lag.ms": 1000}),
                                segs.__getitem__, NOW)
    assert [f.path for f in plans[0].inputs] == ["partition=0/f0.parquet"]
    assert plan_log_compaction(meta(1), segs.__getitem__, NOW) == []  # delete policy: nothing to compact


def shared(segments: list[SegmentFile], *at: int) -> list[SegmentFile]:
    """The files at `at` as slices of files holding several partitions (layout 2's flushes)."""
    return [replace(f, path=f"shared{i}.parquet", row_groups=(0,)) if i in at else f for i, f in enumerate(segments)]


def test_retention_and_compaction_stop_at_the_first_slice_of_a_shared_file() -> None:
    old = NOW - 9000
    segs = {0: shared(files(0, (1, 100, old), (1, 100, old), (1, 100, old), (1, 100, old)), 1)}
    plans = plan_retention(meta(1, **{"retention.ms": 1000}), segs.__getitem__, NOW)
    assert [f.path for f in plans[0].inputs] == ["partition=0/f0.parquet"]  # not the shared slice, nor after it
    compaction = plan_log_compaction(meta(1, **{"cleanup.policy": "compact"}), segs.__getitem__, NOW)
    assert [f.path for f in compaction[0].inputs] == ["partition=0/f0.parquet"]


def test_the_topic_wide_cap_never_takes_a_shared_slice() -> None:
    segs = {0: shared(files(0, (1, 500, NOW - 99), (1, 500, NOW)), 0), 1: files(1, (1, 500, NOW - 10), (1, 500, NOW))}
    plans = plan_retention(meta(2, **{"retention.topic.bytes": 100}), segs.__getitem__, NOW)
    assert [(p.partition, [f.path for f in p.inputs]) for p in plans] == [(1, ["partition=1/f0.parquet"])]


def test_roll_always_takes_shared_slices_in_runs_of_their_own() -> None:
    segs = {0: shared(files(0, *[(1, 30, NOW)] * 6), 2, 3, 5)}
    plans = plan_segment_roll(meta(1, **{"segment.bytes": 1000}), segs.__getitem__, NOW)
    # f0+f1 are young and small: they wait; each run of shared slices is rolled alone, even a single one
    assert [list(g) for g in plans[0].groups] == [["shared2.parquet", "shared3.parquet"], ["shared5.parquet"]]
    assert plans[0].finished == (False, False)  # small files again, which later rolls merge into segments
