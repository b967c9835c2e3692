"""Prometheus metrics of one server: produce and fetch, Delta commits, errors, consumer lag."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from lakelog.platform.errors import LakelogError
from lakelog.platform.storage import STORAGE_ERRORS

if TYPE_CHECKING:
    from lakelog.platform import Broker
    from lakelog.platform.groups import GroupCoordinator

# What a scrape passes over (a topic deleted meanwhile, a closed broker, a failing store); a bug still raises.
SKIPPED: tuple[type[BaseException], ...] = (LakelogError, *STORAGE_ERRORS)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # CPU, memory, open files (process_*) and the Python version: the default registry's collectors, here
        # on lakelog's own registry (one per server, so tests with several servers do not share series).
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self.produce_records = Counter("lakelog_produce_records", "Records produced", ["topic"], registry=r)
        self.produce_bytes = Counter("lakelog_produce_bytes", "Request body bytes produced", ["topic"], registry=r)
        self.produce_latency = Histogram("lakelog_produce_latency_seconds", "Produce request latency",
                                         ["acks"], buckets=LATENCY_BUCKETS, registry=r)
        self.fetch_records = Counter("lakelog_fetch_records", "Records fetched (fetch and group poll)", ["topic"],
                                     registry=r)
        self.fetch_bytes = Counter("lakelog_fetch_bytes", "Record bytes fetched", ["topic"], registry=r)
        self.fetch_latency = Histogram("lakelog_fetch_latency_seconds", "Fetch and poll latency (includes long poll)",
                                       ["kind"], buckets=LATENCY_BUCKETS, registry=r)
        self.errors = Counter("lakelog_errors", "Error answers by Kafka error code", ["code"], registry=r)
        self.topics_seen: set[str] = set()
        self._produced: dict[str, tuple[Any, Any]] = {}  # topic -> its produce counters' children
        self._latency: dict[str, Any] = {}  # acks -> its produce latency histogram's child

    def produced(self, topic: str, records: int, body_bytes: int, acks: str, seconds: float) -> None:
        """One produce request answered: its series' children looked up once per topic (`labels` takes a
        lock and builds a key at every call)."""
        self.topics_seen.add(topic)  # again after a delete of the topic took it out
        children = self._produced.get(topic)
        if children is None:
            children = self._produced[topic] = (self.produce_records.labels(topic), self.produce_bytes.labels(topic))
        children[0].inc(records)
        children[1].inc(body_bytes)
        latency = self._latency.get(acks)
        if latency is None:
            latency = self._latency[acks] = self.produce_latency.labels(acks)
        latency.observe(seconds)

    def attach(self, broker: Broker, coordinator: GroupCoordinator) -> None:
        self.registry.register(_StateCollector(broker, coordinator, self.topics_seen))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector(Collector):
    """Read at scrape time from memory: per topic this node produced to, Delta commits, conflicts and log start
    and end offsets per partition; offset commits, group members and lag per group and partition."""

    def __init__(self, broker: Broker, coordinator: GroupCoordinator, topics: set[str]) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self.topics = topics

    def collect(self) -> Iterator:
        commits = CounterMetricFamily("lakelog_delta_commits", "Delta commits of topic tables", labels=["topic"])
        conflicts = CounterMetricFamily("lakelog_delta_commit_conflicts",
                                        "Delta commit conflicts (each one retried)", labels=["topic"])
        end = GaugeMetricFamily("lakelog_log_end_offset", "Offset the next record of the partition gets",
                                labels=["topic", "partition"])
        start = GaugeMetricFamily("lakelog_log_start_offset", "First offset still in the partition",
                                  labels=["topic", "partition"])
        # The topics this node serves, as it sees them: no storage request and no topic opened by a scrape.
        for topic in sorted(self.topics):
            try:
                topic_log, states = self.broker.topic_log(topic), self.broker.known_states(topic)
            except SKIPPED:  # deleted topic or closed broker: nothing to report
                continue
            commits.add_metric([topic], topic_log.commits)
            conflicts.add_metric([topic], topic_log.conflicts)
            for state in states:
                end.add_metric([topic, str(state.partition)], state.log_end_offset)
                start.add_metric([topic, str(state.partition)], state.log_start_offset)
        yield from (commits, conflicts, end, start)
        traffic = self.broker.traffic
        yield CounterMetricFamily("lakelog_produced_record_bytes", "Record bytes (keys and values) of the produce "
                                  "calls this node took", value=traffic.produced_bytes)
        yield CounterMetricFamily("lakelog_forward_request_bytes", "Request body bytes of produce calls forwarded "
                                  "to other nodes (a reference per group-send with the journal on)",
                                  value=traffic.forward_request_bytes)
        yield CounterMetricFamily("lakelog_forward_answer_bytes", "Answer body bytes of produce calls forwarded to "
                                  "other nodes", value=traffic.forward_answer_bytes)
        store = self.coordinator.store
        yield CounterMetricFamily("lakelog_offset_commits", "Delta commits of consumer offsets", value=store.commits)
        yield CounterMetricFamily("lakelog_offset_commit_retries", "Retried consumer-offset commits",
                                  value=store.failures)
        yield CounterMetricFamily("lakelog_group_rebalances", "Group rebalances", value=self.coordinator.rebalances)
        lag = GaugeMetricFamily("lakelog_consumer_lag", "Log end offset minus committed offset",
                                labels=["group", "topic", "partition"])
        members = GaugeMetricFamily("lakelog_group_members", "Members of a consumer group", labels=["group"])
        for group in self.coordinator.group_ids():
            try:
                view = self.coordinator.describe(group)
            except Exception:
                continue
            members.add_metric([group], len(view.members))
            for (topic, partition), value in view.lag.items():
                lag.add_metric([group, topic, str(partition)], value)
        yield lag
        yield members
