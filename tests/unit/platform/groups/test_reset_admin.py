"""groups.admin: reset targets (Kafka's --to-* and --shift-by, clamped to the log) and lag rows."""

from __future__ import annotations

import pytest

from lakelog.platform.errors import InvalidRequest, UnknownTopicOrPartition
from lakelog.platform.groups.admin import (
    PartitionLag,
    ResetSpec,
    ResetTarget,
    clamp,
    datetime_ms,
    lag_rows,
    plan_reset,
    reset_partitions,
    target_offset,
)
from lakelog.platform.groups.offsets import CommittedOffset


class FakeOffsets:
    """Partition p spans [starts[p], ends[p]); record o was written at time 1000 * o."""

    def __init__(self, starts: dict[int, int], ends: dict[int, int]) -> None:
        self.starts, self.ends = starts, ends

    def list_offset(self, topic: str, partition: int, spec: str | int) -> int:
        if spec == "earliest":
            return self.starts[partition]
        if spec == "latest":
            return self.ends[partition]
        assert isinstance(spec, int)
        first = -(-spec // 1000)
        return first if first < self.ends[partition] else self.ends[partition]


def committed(**offsets: int) -> dict[tuple[str, int], CommittedOffset]:
    return {("t", int(p[1:])): CommittedOffset(o, None, 0) for p, o in offsets.items()}


@pytest.mark.parametrize("offset,expected", [(-5, 10), (10, 10), (15, 15), (20, 20), (99, 20)])
def test_clamp_keeps_offsets_within_the_log(offset: int, expected: int) -> None:
    assert clamp(offset, 10, 20) == expected


@pytest.mark.parametrize("spec,current,expected", [
    (ResetSpec("earliest"), 15, 10),
    (ResetSpec("latest"), 15, 20),
    (ResetSpec("offset", 12), 15, 12),
    (ResetSpec("offset", 3), 15, 10),     # below the log start: the log start
    (ResetSpec("offset", 50), 15, 20),    # past the log end: the log end
    (ResetSpec("shift", 3), 15, 18),
    (ResetSpec("shift", -2), 15, 13),
    (ResetSpec("shift", -100), 15, 10),
    (ResetSpec("shift", 100), 15, 20),
    (ResetSpec("offset", 12), None, 12),
])
def test_target_offset(spec: ResetSpec, current: int | None, expected: int) -> None:
    assert target_offset(spec, current, 10, 20) == expected


def test_target_offset_for_a_timestamp_is_the_brokers_answer_clamped() -> None:
    assert target_offset(ResetSpec("timestamp", 0), None, 10, 20, offset_at_time=14) == 14
    assert target_offset(ResetSpec("timestamp", 0), None, 10, 20, offset_at_time=5) == 10


def test_shift_needs_a_committed_offset() -> None:
    with pytest.raises(InvalidRequest):
        target_offset(ResetSpec("shift", 1), None, 0, 10)
    with pytest.raises(InvalidRequest, match="t-1"):
        plan_reset(FakeOffsets({0: 0, 1: 0}, {0: 5, 1: 5}), committed(p0=2), ResetSpec("shift", 1),
                   [("t", 0), ("t", 1)])


@pytest.mark.parametrize("kind,value", [("offset", None), ("shift", None), ("timestamp", -1), ("offset", -1),
                                        ("sideways", 1)])
def test_bad_specs_are_refused(kind: str, value: int | None) -> None:
    with pytest.raises(InvalidRequest):
        ResetSpec(kind, value)  # type: ignore[arg-type]


def test_http_spec_forms() -> None:
    assert ResetSpec.of("earliest") == ResetSpec("earliest")
    assert ResetSpec.of(1700) == ResetSpec("timestamp", 1700)
    with pytest.raises(InvalidRequest):
        ResetSpec.of("explicit")


def test_plan_moves_each_partition_and_reports_the_current_offset() -> None:
    log = FakeOffsets({0: 0, 1: 4}, {0: 10, 1: 8})
    plan = plan_reset(log, committed(p0=7, p1=6), ResetSpec("shift", -5), [("t", 0), ("t", 1)])
    assert plan == [ResetTarget("t", 0, 7, 2), ResetTarget("t", 1, 6, 4)]
    plan = plan_reset(log, committed(p0=7), ResetSpec("timestamp", 2500), [("t", 0), ("t", 1)])
    assert plan == [ResetTarget("t", 0, 7, 3), ResetTarget("t", 1, None, 4)]  # p1's offset 3 is below its start
    assert plan_reset(log, {}, ResetSpec("timestamp", 10**9), [("t", 0)]) == [ResetTarget("t", 0, None, 10)]


def test_reset_partitions_names_partitions_topics_or_all_committed() -> None:
    counts = {"t": 3, "u": 2}.__getitem__
    assert reset_partitions(counts, committed(p1=0), [("t", 2)]) == [("t", 2)]
    assert reset_partitions(counts, committed(p1=0), [("u", None), ("t", 0)]) == [("t", 0), ("u", 0), ("u", 1)]
    assert reset_partitions(counts, committed(p1=0), None) == [("t", 0), ("t", 1), ("t", 2)]
    with pytest.raises(UnknownTopicOrPartition):
        reset_partitions(counts, {}, [("t", 3)])
    with pytest.raises(InvalidRequest):
        reset_partitions(counts, {}, None)


def test_lag_rows() -> None:
    rows = lag_rows(committed(p0=3, p2=9), {("t", 0): 10, ("t", 1): 5, ("t", 2): 8}, {("t", 1): "m-1"})
    assert rows == [PartitionLag("t", 0, 3, 10, 7, None), PartitionLag("t", 1, None, 5, None, "m-1"),
                    PartitionLag("t", 2, 9, 8, 0, None)]


@pytest.mark.parametrize("text,ms", [
    ("1970-01-01T00:00:01", 1000),
    ("1970-01-01T00:00:01.250", 1250),
    ("1970-01-01T01:00:01+01:00", 1000),
    ("1970-01-01T00:00:01Z", 1000),
    ("2026-11-21", 1795219200000),
])
def test_datetime_ms(text: str, ms: int) -> None:
    assert datetime_ms(text) == ms


def test_datetime_ms_refuses_other_text() -> None:
    with pytest.raises(InvalidRequest, match="ISO-8601"):
        datetime_ms("yesterday")
