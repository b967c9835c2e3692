"""history.py: the bounded ring of samples per topic or group, its series and produce rates, and the
sampler's tick over a fake broker and coordinator (no storage, no threads)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.platform.errors import UnknownTopicOrPartition
from lakelog.platform.ops.history import (
    History,
    HistorySampler,
    column,
    group_series,
    rates,
    topic_series,
)
from lakelog.platform.log import PartitionState

INTERVAL, WINDOW = 5_000, 60_000  # 13 samples at most


def topic_history() -> History[int]:
    return History(2, INTERVAL, WINDOW)


def test_samples_come_back_oldest_first_with_their_values() -> None:
    history = topic_history()
    history.add(1_000, "orders", {0: (3, 300), 1: (2, 200)})
    history.add(6_000, "orders", {1: (5, 500), 0: (4, 400)})
    samples = history.since("orders", 0)
    assert [s.at_ms for s in samples] == [1_000, 6_000]
    assert samples[1].keys == (0, 1) and list(samples[1].columns[0]) == [4, 5] and list(samples[1].columns[1]) == [
        400, 500]
    assert samples[0].keys is samples[1].keys  # unchanged partitions: one tuple for both samples
    assert history.since("unknown", 0) == []


def test_samples_older_than_the_window_are_dropped() -> None:
    history = topic_history()
    for i in range(40):
        history.add(i * INTERVAL, "orders", {0: (i, i)})
    times = [s.at_ms for s in history.since("orders", -1)]
    newest = 39 * INTERVAL
    assert times[-1] == newest and all(t > newest - WINDOW for t in times)
    assert len(times) == WINDOW // INTERVAL  # (newest - window, newest]: 12 samples 5 s apart


def test_a_late_tick_after_a_pause_trims_by_age_not_only_by_count() -> None:
    history = topic_history()
    for i in range(5):
        history.add(i * INTERVAL, "orders", {0: (i, i)})
    history.add(4 * INTERVAL + WINDOW, "orders", {0: (9, 9)})  # a pause of a whole window
    assert [s.at_ms for s in history.since("orders", -1)] == [4 * INTERVAL + WINDOW]


def test_since_gives_the_sample_before_as_the_base_of_the_first_rate() -> None:
    history = topic_history()
    for i, end in enumerate([10, 20, 35]):
        history.add(i * INTERVAL, "orders", {0: (end, end * 100)})
    assert [s.at_ms for s in history.since("orders", INTERVAL)] == [INTERVAL, 2 * INTERVAL]
    series = topic_series(history.since("orders", INTERVAL), INTERVAL)
    assert series.times_ms == [2 * INTERVAL]
    assert series.partitions[0].log_end_offset == [35] and series.partitions[0].records_per_s == [3.0]
    everything = topic_series(history.since("orders", -1), -1)
    assert everything.partitions[0].records_per_s == [None, 2.0, 3.0]
    assert everything.partitions[0].size_bytes == [1000, 2000, 3500]
    assert topic_series(history.since("orders", 2 * INTERVAL), 2 * INTERVAL).times_ms == []


def test_the_same_time_replaces_and_an_earlier_time_starts_over() -> None:
    history = topic_history()
    history.add(10_000, "orders", {0: (1, 1)})
    history.add(10_000, "orders", {0: (2, 2)})
    assert [list(s.columns[0]) for s in history.since("orders", 0)] == [[2]]
    history.add(15_000, "orders", {0: (3, 3)})
    history.add(12_000, "orders", {0: (4, 4)})  # the wall clock stepped back
    assert [(s.at_ms, list(s.columns[0])) for s in history.since("orders", 0)] == [(12_000, [4])]


def test_retain_forgets_the_other_subjects() -> None:
    history = topic_history()
    for name in ("a", "b", "c"):
        history.add(1_000, name, {0: (1, 1)})
    history.retain({"b"})
    assert history.subjects() == ["b"] and history.since("a", 0) == []


def test_a_partition_added_later_is_none_before() -> None:
    history = topic_history()
    history.add(0, "orders", {0: (1, 10)})
    history.add(INTERVAL, "orders", {0: (2, 20), 1: (7, 70)})
    ends = column(history.since("orders", -1), 0)
    assert ends == {0: [1, 2], 1: [None, 7]}
    series = topic_series(history.since("orders", -1), -1)
    assert [p.records_per_s for p in series.partitions] == [[None, 0.2], [None, None]]


def test_group_series_per_topic_partition() -> None:
    history: History[tuple[str, int]] = History(1, INTERVAL, WINDOW)
    history.add(0, "billing", {("orders", 1): (4,), ("orders", 0): (2,)})
    history.add(INTERVAL, "billing", {("orders", 0): (0,)})
    series = group_series(history.since("billing", -1), -1)
    assert series.times_ms == [0, INTERVAL]
    assert [(s.topic, s.partition, s.lag) for s in series.partitions] == [("orders", 0, [2, 0]),
                                                                          ("orders", 1, [4, None])]
    assert group_series(history.since("billing", 0), 0).partitions[0].lag == [0]  # orders-1: nothing since


def test_rates() -> None:
    assert rates([], []) == []
    assert rates([0, 2_000, 4_000, 6_000, 8_000], [0, 10, None, 20, 15]) == [None, 5.0, None, None, None]
    assert rates([0, 0], [1, 5]) == [None, None]  # no time between: no rate
    assert rates([0, 5_001], [0, 2]) == [None, 0.4]  # a late tick's jitter is rounded away


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-3 * INTERVAL, 4 * INTERVAL), st.integers(0, 10**12)), max_size=60))
def test_the_ring_stays_bounded_ordered_and_within_the_window(steps: list[tuple[int, int]]) -> None:
    history = topic_history()
    at = 0
    for step, value in steps:
        at += step  # mostly forward, sometimes the same time or back
        history.add(at, "t", {0: (value, value)})
        samples = history.since("t", -10**15)
        times = [s.at_ms for s in samples]
        assert times == sorted(set(times))  # strictly increasing
        assert len(samples) <= history.capacity
        assert times[-1] == at and list(samples[-1].columns[0]) == [value]  # the newest is the one just added
        assert all(t > at - WINDOW for t in times)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20_000), st.integers(0, 10_000)), min_size=1, max_size=30),
       st.integers(0, 30))
def test_rates_add_up_to_the_growth_of_the_log_end_offset(steps: list[tuple[int, int]], cut: int) -> None:
    history: History[int] = History(2, INTERVAL, 10**9)  # nothing ages out: every step is kept
    at, end = 0, 0
    for gap, produced in steps:
        at, end = at + gap, end + produced
        history.add(at, "t", {0: (end, 0)})
    samples = history.since("t", -1)
    since = samples[min(cut, len(samples) - 1)].at_ms
    series = topic_series(history.since("t", since), since)
    before = [s for s in samples if s.at_ms <= since]
    times = [before[-1].at_ms] + series.times_ms
    grown = sum(r * (t1 - t0) / 1000 for r, t0, t1 in zip(series.partitions[0].records_per_s, times, times[1:])) \
        if series.partitions else 0
    seconds = (times[-1] - times[0]) / 1000
    assert grown == pytest.approx(end - before[-1].columns[0][0], abs=0.0005 * seconds + 1e-9)  # rounded rates


# ---- the sampler's tick ---------------------------------------------------------------------------


@dataclass
class FakeBroker:
    led: dict[str, list[PartitionState]] | None = field(default_factory=dict)

    def led_partition_states(self) -> dict[str, list[PartitionState]] | None:
        return self.led


@dataclass
class FakeView:
    lag: dict[tuple[str, int], int]


@dataclass
class FakeCoordinator:
    lags: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)

    def group_ids(self) -> list[str]:
        return sorted(self.lags)

    def describe(self, group: str) -> FakeView:
        if group in self.broken:
            raise UnknownTopicOrPartition("a topic of it is gone")
        return FakeView(self.lags[group])


def states(*ends: int) -> list[PartitionState]:
    return [PartitionState(p, 0, end, end * 10, 1) for p, end in enumerate(ends)]


def test_a_tick_samples_led_topics_and_coordinated_groups_and_forgets_the_rest() -> None:
    now = [100_000]
    broker = FakeBroker({"orders": states(3, 4), "audit": states(1)})
    coordinator = FakeCoordinator({"billing": {("orders", 0): 2}, "reports": {("orders", 1): 1}})
    sampler = HistorySampler(broker, coordinator, 5, 3600, clock=lambda: now[0])  # type: ignore[arg-type]
    sampler.tick()
    now[0] += 5_000
    broker.led = {"orders": states(13, 4)}  # audit deleted, or led by another node now
    coordinator.lags["billing"] = {("orders", 0): 7}
    coordinator.broken = {"reports"}  # one group failing to describe keeps its history
    sampler.tick()
    orders = sampler.topic("orders")
    assert orders.times_ms == [100_000, 105_000]
    assert [(p.log_end_offset, p.size_bytes, p.records_per_s) for p in orders.partitions] == [
        ([3, 13], [30, 130], [None, 2.0]), ([4, 4], [40, 40], [None, 0.0])]
    assert sampler.topic("audit").times_ms == [] and sampler.topics.subjects() == ["orders"]
    assert [s.lag for s in sampler.group("billing").partitions] == [[2, 7]]
    assert sampler.group("reports").times_ms == [100_000]
    assert sampler.topic("orders", since_ms=100_000).times_ms == [105_000]
    now[0] += 5_000
    broker.led = None  # no fresh view of the cluster: what it leads is unknown, nothing is forgotten
    coordinator.lags.pop("reports")
    sampler.tick()
    assert sampler.topic("orders").times_ms == [100_000, 105_000]
    assert sampler.groups.subjects() == ["billing"]
    now[0] += 3_600_000  # an hour with nothing sampled: what is held is too old to answer
    assert sampler.topic("orders").times_ms == [] and sampler.group("billing").times_ms == []


def test_the_thread_samples_every_interval_and_stops() -> None:
    broker = FakeBroker({"orders": states(1)})
    sampler = HistorySampler(broker, FakeCoordinator(), 0.02, 3600).start()  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 5
        while len(sampler.topics.since("orders", -1)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        sampler.close()
    assert len(sampler.topics.since("orders", -1)) >= 2
    assert not sampler._thread.is_alive()
