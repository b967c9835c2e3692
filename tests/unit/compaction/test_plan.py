"""compaction.plan: the roll always takes shared slices, whatever their size, so compaction is never blocked.

A flush of several partitions is one file (layout 2) whose slices retention and compaction leave to the
roll. The roll once left a lone slice alone when it alone reached segment.bytes (a big flush's) or
segment.ms: compaction then waited for it for ever, and a roll of the same file's smaller slices failed.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.compaction.plan import RollGroup, plan_roll
from lakelog.compaction.planners import plan_log_compaction, plan_segment_roll
from lakelog.platform.catalog.catalog import TopicMeta
from lakelog.platform.segments.index import SegmentFile
from lakelog.platform.catalog.topic_config import parse_topic_config

NOW = 10_000_000
SEGMENT_BYTES = 1024
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": SEGMENT_BYTES, "min.compaction.lag.ms": 0}


def segment(path: str, partition: int, first: int, records: int, size: int, written_ms: int = NOW,
            shared: bool = False) -> SegmentFile:
    """A file (or, `shared`, one partition's slice of a file holding several) of consecutive offsets."""
    return SegmentFile(path, partition, size, records, first, first + records - 1, written_ms - 1, written_ms,
                       modification_time_ms=written_ms, row_groups=(0,) if shared else None)


def meta(partitions: int, **config: object) -> TopicMeta:
    return TopicMeta("t", partitions, parse_topic_config(config), 0, 0, 0)


def issue_layout() -> dict[int, list[SegmentFile]]:
    """The issue's topic: 2,000 keyed records in one flush over 3 partitions (slices of segment.bytes and
    more), then 50 more in a second flush (small slices)."""
    counts = {0: (500, 4037), 1: (800, 6460), 2: (700, 6843)}
    tail = {0: (12, 241), 1: (20, 402), 2: (18, 361)}
    return {p: [segment("flush0.parquet", p, 0, n, size, shared=True),
                segment("flush1.parquet", p, n, tail[p][0], tail[p][1], shared=True)]
            for p, (n, size) in counts.items()}


def test_a_lone_slice_of_segment_bytes_or_more_is_rolled_into_a_finished_segment() -> None:
    big = segment("flush0.parquet", 0, 0, 500, 4 * SEGMENT_BYTES, shared=True)
    after = segment("p0-a.parquet", 0, 500, 1, 2 * SEGMENT_BYTES)  # a full file of this partition alone
    assert plan_roll(0, [big, after], SEGMENT_BYTES, 604_800_000, NOW) == [
        RollGroup(0, (big,), SEGMENT_BYTES, "size")]


def test_a_lone_slice_past_segment_ms_is_rolled() -> None:
    old = segment("flush0.parquet", 0, 0, 3, 100, written_ms=NOW - 5000, shared=True)
    after = segment("p0-a.parquet", 0, 3, 1, 100)  # a file of one partition ends the slices' run
    groups = plan_roll(0, [old, after], SEGMENT_BYTES, 1000, NOW)
    assert [(g.inputs, g.reason) for g in groups] == [((old,), "age")]


def test_the_roll_takes_every_slice_of_a_flush_whatever_its_size() -> None:
    segs = issue_layout()
    plans = plan_segment_roll(meta(3, **COMPACTED), segs.__getitem__, NOW)
    rolled = {(f.path, p.partition) for p in plans for f in p.inputs}
    assert rolled == {(f.path, p) for p, files in segs.items() for f in files}  # every slice, in one run
    # the big slices are segments already; the tail's are small files that later rolls merge
    assert all(p.finished == (True, False) for p in plans)


def rolled(files: list[SegmentFile], groups: tuple[tuple[str, ...], ...]) -> list[SegmentFile]:
    """What the roll's rewrite leaves: each group's inputs become one file of this partition alone."""
    by_path = {f.path: f for f in files}
    out = [f for f in files if not any(f.path in g for g in groups)]
    for i, group in enumerate(groups):
        inputs = [by_path[path] for path in group]
        out.append(segment(f"rolled-{inputs[0].partition}-{i}.parquet", inputs[0].partition, inputs[0].min_offset,
                           sum(f.num_records for f in inputs), sum(f.size_bytes for f in inputs)))
    return sorted(out, key=lambda f: f.min_offset)


def test_after_the_roll_compaction_covers_everything_but_the_active_segment() -> None:
    segs = issue_layout()
    config = meta(3, **COMPACTED)
    assert plan_log_compaction(config, segs.__getitem__, NOW) == []  # it waits for the roll, by design
    plans = {p.partition: p for p in plan_segment_roll(config, segs.__getitem__, NOW)}
    after = {p: rolled(files, plans[p].groups) for p, files in segs.items()}
    compaction = plan_log_compaction(config, after.__getitem__, NOW)
    assert {p.partition: p.inputs for p in compaction} == {p: tuple(files[:-1]) for p, files in after.items()}
    assert all(p.inputs[-1].max_offset == segs[p.partition][0].max_offset for p in compaction)  # the whole flush


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5 * SEGMENT_BYTES), st.integers(0, 20_000)),
                min_size=1, max_size=25),
       st.integers(1, 30_000))
def test_every_shared_slice_is_rolled_in_runs_of_its_own(specs: list[tuple[bool, int, int]], segment_ms: int) -> None:
    files, offset = [], 0
    for i, (is_shared, size, age_ms) in enumerate(specs):
        files.append(segment(f"f{i}.parquet", 0, offset, 2, size, NOW - age_ms, is_shared))
        offset += 2
    groups = plan_roll(0, files, SEGMENT_BYTES, segment_ms, NOW)
    taken = [f for g in groups for f in g.inputs]
    assert {f.path for f in taken} >= {f.path for f in files if f.shared}  # a shared file goes only whole
    assert len(taken) == len({f.path for f in taken})  # each file in one group at most
    for g in groups:
        assert len({f.shared for f in g.inputs}) == 1  # never a run mixing slices and other files
        at = files.index(g.inputs[0])
        assert list(g.inputs) == files[at:at + len(g.inputs)]  # consecutive: offsets stay contiguous
