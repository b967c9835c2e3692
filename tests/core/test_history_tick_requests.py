"""What one tick of the history sampler costs on S3, counted by the latency proxy: no request for the topics
this node leads (its own commits are known without reading them back) nor for the groups it coordinates,
where describing the same topic reads the table's log."""

from __future__ import annotations

import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.groups import GroupCoordinator
from lakelog.platform.ops.history import HistorySampler
from lakelog.platform.layout import OFFSETS_TABLE, topic_path
from lakelog.settings import Settings

pytestmark = pytest.mark.s3
PARTITIONS = 4


def test_a_history_tick_makes_no_object_request(s3_proxy) -> None:
    broker = Broker(Settings(root=s3_proxy.root(), storage=s3_proxy.options, linger_ms=2))
    coordinator = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
    sampler = HistorySampler(broker, coordinator, interval_s=3600, window_s=3600)  # not started: ticked here
    batch = [Record(b"v", partition=p) for p in range(PARTITIONS)]
    try:
        broker.create_topic("sampled", PARTITIONS)
        broker.produce("sampled", batch)
        coordinator.commit("readers", None, -1, [("sampled", 0, 1, None)]).result()
        sampler.tick()  # the first tick after opening may read (log end offsets not yet known)
        broker.produce("sampled", batch)  # this node's commit since: known without a read
        with s3_proxy.counter.measure() as counted:
            sampler.tick()
        touched = [r for r in counted.requests if topic_path("sampled") in r.target or OFFSETS_TABLE in r.target]
        assert touched == [], counted.describe()
        assert [p.log_end_offset[-1] for p in sampler.topic("sampled").partitions] == [2] * PARTITIONS
        assert [s.lag[-1] for s in sampler.group("readers").partitions] == [1]
        with s3_proxy.counter.measure() as described:
            broker.describe_topic("sampled")
        assert any(topic_path("sampled") in r.target for r in described.requests)  # a describe does read
    finally:
        sampler.close()
        coordinator.close()
        broker.close()
