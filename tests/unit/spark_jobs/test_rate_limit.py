"""Trigger admission of the streaming source: maxOffsetsPerTrigger and minOffsetsPerTrigger/maxTriggerDelay."""

from __future__ import annotations

from lakelog.spark_jobs.source import BatchGate, rate_limit

A, B = ("t", 0), ("t", 1)


def test_rate_limit_shares_the_limit_by_backlog():
    """Guide, maxOffsetsPerTrigger: "Rate limit on maximum number of offsets processed per trigger interval.
    The specified total number of offsets will be proportionally split across topicPartitions of different
    volume"."""
    base, ends = {A: 0, B: 100}, {A: 300, B: 200}
    out = rate_limit(base, ends, 40)
    assert out == {A: 30, B: 110}  # backlogs 300 and 100: shares 3/4 and 1/4
    assert sum(out[tp] - base[tp] for tp in out) <= 40


def test_rate_limit_never_starves_a_small_partition_and_takes_all_below_the_limit():
    assert rate_limit({A: 0, B: 0}, {A: 1000, B: 1}, 10)[B] == 1
    assert rate_limit({A: 5, B: 5}, {A: 9, B: 6}, 10) == {A: 9, B: 6}


def test_gate_never_holds_the_first_batch_of_a_run():
    """Kafka starts its last-trigger time at 0, so the first batch after a (re)start runs at once."""
    gate = BatchGate(min_offsets=100, max_delay_ms=60_000)
    assert not gate.hold({A: 0}, {A: 1}, now_ms=1_000_000)


def test_gate_holds_until_min_offsets_then_admits():
    """Guide, minOffsetsPerTrigger: "Minimum number of offsets to be processed per trigger interval";
    maxTriggerDelay: "Maximum amount of time for which trigger can be delayed between two triggers provided
    some data is available from the source"."""
    gate = BatchGate(min_offsets=50, max_delay_ms=60_000)
    assert not gate.hold({A: 0, B: 0}, {A: 10, B: 10}, now_ms=1_000_000)  # first batch
    assert gate.hold({A: 10, B: 10}, {A: 30, B: 39}, now_ms=1_001_000)  # 49 new < 50
    assert not gate.hold({A: 10, B: 10}, {A: 30, B: 40}, now_ms=1_002_000)  # 50 new
    assert gate.last_trigger_ms == 1_002_000


def test_gate_admits_after_max_trigger_delay():
    gate = BatchGate(min_offsets=50, max_delay_ms=60_000)
    assert not gate.hold({A: 0}, {A: 0}, now_ms=1_000_000)
    assert gate.hold({A: 0}, {A: 1}, now_ms=1_059_999)
    assert not gate.hold({A: 0}, {A: 1}, now_ms=1_060_000)  # the delay has passed: one record is enough
    assert gate.hold({A: 1}, {A: 2}, now_ms=1_060_001)  # and the clock starts again


def test_gate_counts_a_new_partition_from_its_base():
    gate = BatchGate(min_offsets=5, max_delay_ms=60_000, last_trigger_ms=1_000_000)
    assert not gate.hold({A: 10, B: 0}, {A: 10, B: 5}, now_ms=1_000_001)
