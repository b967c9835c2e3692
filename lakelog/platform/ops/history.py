"""The recent past of what the console plots, in memory: per topic this node leads, each partition's log end
offset and size; per group it coordinates, each partition's lag. One sample every interval (5 s), kept for a
window (an hour), in a bounded ring per topic or group. Nothing is stored: a node that starts, or takes a
topic or group over, starts its history then.

`History` and the series functions are pure (times are given, never read), so they are unit tested alone;
`HistorySampler` is the thread that feeds them every interval from what this node holds in memory.
"""

from __future__ import annotations

import bisect
import logging
import threading
from array import array
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Collection, Generic, Mapping, Sequence, TypeVar

from lakelog.platform.clock import now_ms
from lakelog.platform.records import TopicPartition

if TYPE_CHECKING:
    from lakelog.platform.broker.node import Broker
    from lakelog.platform.groups import GroupCoordinator

log = logging.getLogger(__name__)

# What a subject's values are per: a partition (topics), a (topic, partition) (groups).
Key = TypeVar("Key", int, tuple[str, int])
END, SIZE = 0, 1  # a topic sample's measures
LAG = 0  # a group sample's measure


@dataclass(frozen=True)
class Sample(Generic[Key]):
    """One subject (a topic or a group) at one time: `columns[m][i]` is measure m of `keys[i]`. Arrays of
    int64, and `keys` shared with the previous sample while they do not change, keep an hour of a topic of
    1,000 partitions at about 16 bytes per partition and sample."""

    at_ms: int
    keys: tuple[Key, ...]
    columns: tuple[array, ...]


class History(Generic[Key]):
    """Samples per subject, oldest first: at most `window_ms // interval_ms + 1` of them, none older than
    `window_ms` before the newest. Subjects the sampler no longer sees (deleted, or led or coordinated by
    another node) are forgotten (`retain`), so memory follows what this node serves."""

    def __init__(self, measures: int, interval_ms: int, window_ms: int) -> None:
        if measures < 1 or interval_ms < 1 or window_ms < interval_ms:
            raise ValueError(f"bad history shape: {measures} measures, every {interval_ms} ms for {window_ms} ms")
        self.measures, self.interval_ms, self.window_ms = measures, interval_ms, window_ms
        self.capacity = window_ms // interval_ms + 1
        self._rings: dict[str, deque[Sample[Key]]] = {}
        self._lock = threading.Lock()  # the sampler adds while requests read

    def add(self, at_ms: int, subject: str, values: Mapping[Key, Sequence[int]]) -> None:
        """`values`: key -> one int per measure."""
        keys: tuple[Key, ...] = tuple(sorted(values))
        columns = tuple(array("q", [values[k][m] for k in keys]) for m in range(self.measures))
        with self._lock:
            ring = self._rings.setdefault(subject, deque(maxlen=self.capacity))
            if ring and at_ms <= ring[-1].at_ms:
                # Same time: the newer replaces it. Earlier: the wall clock stepped back; start over rather
                # than keep a series whose times go backwards.
                if at_ms < ring[-1].at_ms:
                    ring.clear()
                else:
                    ring.pop()
            if ring and ring[-1].keys == keys:
                keys = ring[-1].keys
            ring.append(Sample(at_ms, keys, columns))
            while ring[0].at_ms <= at_ms - self.window_ms:
                ring.popleft()

    def retain(self, subjects: Collection[str]) -> None:
        """Forget every subject but these."""
        with self._lock:
            for subject in [s for s in self._rings if s not in subjects]:
                del self._rings[subject]

    def subjects(self) -> list[str]:
        with self._lock:
            return sorted(self._rings)

    def since(self, subject: str, since_ms: int) -> list[Sample[Key]]:
        """The samples after `since_ms`, preceded by the newest one at or before it when there is one (the
        base of the first produce rate); [] for a subject never sampled."""
        with self._lock:
            samples = list(self._rings.get(subject, ()))
        first = bisect.bisect_right([s.at_ms for s in samples], since_ms)
        return samples[max(first - 1, 0):]


# ---- series: what the history endpoints answer ---------------------------------------------------


def column(samples: Sequence[Sample[Key]], measure: int) -> dict[Key, list[int | None]]:
    """Per key, one measure at each sample's time; None where the key was not sampled then (a partition
    added later, a partition the group had not committed yet)."""
    lines: dict[Key, list[int | None]] = {}
    positions: dict[int, dict[Key, int]] = {}  # id(keys) -> key -> index: keys are shared between samples
    for keys in {id(s.keys): s.keys for s in samples}.values():
        for key in keys:
            lines.setdefault(key, [None] * len(samples))
    for i, sample in enumerate(samples):
        index = positions.setdefault(id(sample.keys), {k: j for j, k in enumerate(sample.keys)})
        values = sample.columns[measure]
        for key, j in index.items():
            lines[key][i] = values[j]
    return {key: lines[key] for key in sorted(lines)}


RATE_DECIMALS = 3  # records/s to the thousandth: the ticks' jitter of a millisecond or two is noise past it


def rates(times_ms: Sequence[int], values: Sequence[int | None]) -> list[float | None]:
    """Change per second since the sample before: records/s from log end offsets. None for the first sample,
    where either value is unknown, or where the value went down (the topic was re-created)."""
    out: list[float | None] = [None]
    for i in range(1, len(values)):
        before, now, seconds = values[i - 1], values[i], (times_ms[i] - times_ms[i - 1]) / 1000
        out.append(None if before is None or now is None or now < before or seconds <= 0
                   else round((now - before) / seconds, RATE_DECIMALS))
    return out[:len(values)]


@dataclass(frozen=True)
class PartitionSeries:
    partition: int
    log_end_offset: list[int | None]
    size_bytes: list[int | None]
    records_per_s: list[float | None]


@dataclass(frozen=True)
class TopicSeries:
    times_ms: list[int]
    partitions: list[PartitionSeries]


@dataclass(frozen=True)
class LagSeries:
    topic: str
    partition: int
    lag: list[int | None]


@dataclass(frozen=True)
class GroupSeries:
    times_ms: list[int]
    partitions: list[LagSeries]


def topic_series(samples: Sequence[Sample[int]], since_ms: int) -> TopicSeries:
    """From `History.since`: the samples after `since_ms`, each with every partition's produce rate since
    the sample before (which may be the one before `since_ms`, there only for that)."""
    times = [s.at_ms for s in samples]
    first = bisect.bisect_right(times, since_ms)
    ends, sizes = column(samples, END), column(samples, SIZE)
    return TopicSeries(times[first:], [
        PartitionSeries(p, ends[p][first:], sizes[p][first:], rates(times, ends[p])[first:])
        for p in ends if any(v is not None for v in ends[p][first:])])


def group_series(samples: Sequence[Sample[TopicPartition]], since_ms: int) -> GroupSeries:
    times = [s.at_ms for s in samples]
    first = bisect.bisect_right(times, since_ms)
    lags = column(samples, LAG)
    return GroupSeries(times[first:], [LagSeries(tp[0], tp[1], lags[tp][first:])
                                       for tp in lags if any(v is not None for v in lags[tp][first:])])


# ---- the sampler ---------------------------------------------------------------------------------


class HistorySampler:
    """A thread that samples every `interval_s`, from memory, what this node serves: the topics it leads and
    has open (`Broker.led_partition_states`: its own commits are known without reading them back) and the
    groups it coordinates (`GroupCoordinator.describe`, lag from the log end offsets it knows). A tick reads
    no storage unless describing a group does (a group's topic not open here yet is opened once)."""

    def __init__(self, broker: Broker, coordinator: GroupCoordinator, interval_s: float, window_s: float,
                 clock: Callable[[], int] = now_ms) -> None:
        interval_ms = max(int(interval_s * 1000), 1)
        window_ms = max(int(window_s * 1000), interval_ms)
        self.topics: History[int] = History(2, interval_ms, window_ms)
        self.groups: History[TopicPartition] = History(1, interval_ms, window_ms)
        self.broker, self.coordinator, self.interval_s, self._clock = broker, coordinator, interval_s, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lakelog-history", daemon=True)
        self._failing = ""  # the last failure logged: one line per new cause, not one per tick

    def start(self) -> HistorySampler:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
                self._failing = ""
            except Exception as exc:  # keep sampling whatever one tick hit
                if str(exc) != self._failing:
                    log.warning("history sample failed: %s", exc)
                self._failing = str(exc)

    def tick(self) -> None:
        at_ms = self._clock()
        self.sample_topics(at_ms)
        self.sample_groups(at_ms)

    def sample_topics(self, at_ms: int) -> None:
        led = self.broker.led_partition_states()
        if led is None:  # no fresh view of the cluster: what this node leads is unknown, keep what it had
            return
        for topic, states in led.items():
            self.topics.add(at_ms, topic, {s.partition: (s.log_end_offset, s.size_bytes) for s in states})
        self.topics.retain(led)

    def sample_groups(self, at_ms: int) -> None:
        groups = self.coordinator.group_ids()
        for group in groups:
            try:
                view = self.coordinator.describe(group)
            except Exception as exc:  # gone since listed, or a topic of it unreadable: the others still count
                log.debug("group %s not sampled: %s", group, exc)
                continue
            self.groups.add(at_ms, group, {tp: (lag,) for tp, lag in view.lag.items()})
        self.groups.retain(set(groups))

    def topic(self, topic: str, since_ms: int | None = None) -> TopicSeries:
        since = self._since(since_ms)
        return topic_series(self.topics.since(topic, since), since)

    def group(self, group: str, since_ms: int | None = None) -> GroupSeries:
        since = self._since(since_ms)
        return group_series(self.groups.since(group, since), since)

    def _since(self, since_ms: int | None) -> int:
        """Never before the window: what a sampler that stopped sampling a subject still holds is stale."""
        oldest = self._clock() - self.topics.window_ms
        return oldest if since_ms is None else max(since_ms, oldest)

    @property
    def interval_ms(self) -> int:
        return self.topics.interval_ms

    @property
    def window_ms(self) -> int:
        return self.topics.window_ms
