"""Object requests of one steady-state produce commit on delta-rs S3, counted by the latency proxy.

Target (issue "Object storage as the design point": a produce commit in two round trips): at most 3
requests per commit, whatever the partition count. Today's path is far from it; the bounds below are
today's measured counts, so a change that adds a request fails here, and they tighten as the commit
path is rebuilt.
"""

from __future__ import annotations

import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.log import CHECKPOINT_INTERVAL
from lakelog.settings import Settings
from log_check import assert_topic_intact

pytestmark = pytest.mark.s3

WARM_UP_COMMITS = 3  # the first commit of a node reads the table's log; later ones do not

# Measured 2026-11 (deltalake 1.6.6): per commit, one data file PUT per partition written, the commit
# PUT, two LISTs of _delta_log, and three GETs and a HEAD of the new commit file (one GET is lakelog
# reading it back for its segment index, through s3fs; the rest is delta-rs around the commit).
TODAY = {
    8: {"put_data": 8, "put_log": 1, "get": 3, "head": 1, "list": 2, "delete": 0, "other": 0},
    64: {"put_data": 64, "put_log": 1, "get": 3, "head": 1, "list": 2, "delete": 0, "other": 0},
}


@pytest.mark.parametrize("partitions", sorted(TODAY))
def test_steady_state_produce_commit_requests_do_not_grow(s3_proxy, partitions: int) -> None:
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
        assert counted.counts["put_log"] == 1, counted.describe()  # one commit, and the counter saw it
        assert counted.counts["put_data"] >= 1, counted.describe()
        over = {kind: (n, TODAY[partitions][kind]) for kind, n in counted.counts.items()
                if n > TODAY[partitions][kind]}
        assert not over, f"requests per commit grew (kind: (now, bound)): {over}\n{counted.describe()}"
    finally:
        broker.close()
    offsets = assert_topic_intact(root, "counted", s3_proxy.options)
    assert {p: len(o) for p, o in offsets.items()} == {p: WARM_UP_COMMITS + 1 for p in range(partitions)}
