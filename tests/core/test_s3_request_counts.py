"""Object requests of one steady-state produce commit on S3, counted by the latency proxy.

The commit path is two round trips: the flush's data files, written in parallel (one PUT per partition
written), then the commit file, put only if its version is free. No reads: the writer's snapshot is
authoritative for its own table. Target of the issue "Object storage as the design point": at most 3
requests per commit whatever the partition count, which needs one object per flush for all partitions
(not built: one file per partition today), so the data PUTs still grow with the partitions written.
"""

from __future__ import annotations

import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.log import CHECKPOINT_INTERVAL
from lakelog.settings import Settings
from log_check import assert_topic_intact

pytestmark = pytest.mark.s3

WARM_UP_COMMITS = 3  # the first commit of a node may read the table's log; later ones do not


@pytest.mark.parametrize("partitions", [8, 64])
def test_a_steady_state_produce_commit_is_one_put_per_partition_and_one_commit_put(s3_proxy,
                                                                                  partitions: int) -> None:
    root = s3_proxy.root()
    broker = Broker(Settings(root=root, storage=s3_proxy.options, linger_ms=5))
    try:
        broker.create_topic("counted", partitions)
        batch = [Record(f"v{p}".encode(), partition=p) for p in range(partitions)]  # every partition
        for _ in range(WARM_UP_COMMITS):
            broker.produce("counted", batch)
        with s3_proxy.counter.measure() as counted:
            result = broker.produce("counted", batch)
        assert result.version % CHECKPOINT_INTERVAL != 0  # steady state: this commit writes no checkpoint
        made = {kind: n for kind, n in counted.counts.items() if n}
        assert made == {"put_data": partitions, "put_log": 1}, counted.describe()
    finally:
        broker.close()
    offsets = assert_topic_intact(root, "counted", s3_proxy.options)
    assert {p: len(o) for p, o in offsets.items()} == {p: WARM_UP_COMMITS + 1 for p in range(partitions)}
