"""Log compaction compacts whatever the file layout (issue 25): the roll, then compaction, on a local
folder and on S3, without Spark (the jobs' rewrites run in this process).

A flush of several partitions is one file (layout 2) that compaction leaves to the roll. A big flush's
slices, each over segment.bytes alone, were never rolled, so compaction never started and every record
stayed. Now the roll takes them and compaction keeps, before each partition's active segment, the latest
record per key only.
"""

from __future__ import annotations

import pytest

from lakelog.platform import Broker, Record
from lakelog.spark_jobs.jobs import run_job
from tests.log_check import assert_topic_intact

KEYS = 20
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.compaction.lag.ms": "0"}

Stored = dict[tuple[int, int], tuple[bytes, bytes]]  # (partition, offset) -> (key, value)


def produce(broker: Broker, topic: str, first: int, count: int, acked: Stored) -> None:
    """`count` keyed records in one call (one flush), remembered by where they landed."""
    records = [Record(f"v{first + i}".encode(), key=f"k{(first + i) % KEYS}".encode()) for i in range(count)]
    result = broker.produce(topic, records)
    for record, (p, o, _) in zip(records, result.records()):
        acked[(p, o)] = (record.key, record.value)


def stored(broker: Broker, topic: str) -> Stored:
    """Every record the topic answers a consumer, through the core's fetch."""
    broker.topic_log(topic).refresh()
    found: Stored = {}
    for p in range(broker.topic(topic).partitions):
        offset, end = broker.list_offset(topic, p, "earliest"), broker.list_offset(topic, p, "latest")
        while offset < end:
            result = broker.fetch(topic, p, offset, max_records=10_000)
            found.update({(p, r.offset): (r.key, r.value) for r in result})
            if result.next_offset is None:
                break
            offset = result.next_offset
    return found


def expected(acked: Stored, active_from: dict[int, int]) -> set[tuple[int, int]]:
    """The latest offset per key below each partition's active segment, and all of the active segment."""
    latest: dict[tuple[int, bytes], int] = {}
    for (p, o), (key, _) in acked.items():
        if o < active_from[p]:
            latest[(p, key)] = max(latest.get((p, key), -1), o)
    return {(p, o) for (p, _), o in latest.items()} | {(p, o) for p, o in acked if o >= active_from[p]}


@pytest.mark.parametrize("flushes", [[2000], [50] * 40], ids=["one-big-flush", "many-small-flushes"])
def test_roll_then_compaction_keeps_the_latest_value_per_key(make_broker, flushes: list[int]) -> None:
    broker = make_broker(linger_ms=0)
    broker.create_topic("c", 3, CONFIG)
    acked: Stored = {}
    for count in flushes:
        produce(broker, "c", len(acked), count, acked)
    produce(broker, "c", len(acked), 50, acked)  # the tail: the active segment of each partition
    assert len(acked) == 2050

    assert run_job("roll", broker).commits == 1  # every partition's slices of the shared files, in one commit
    assert not any(f.shared for files in broker.topic_log("c").all_segments().values() for f in files)
    report = run_job("compact", broker)
    assert report.commits == 3 and report.records_out <= KEYS  # each partition, down to its latest per key

    active_from = {p: files[-1].min_offset for p, files in broker.topic_log("c").all_segments().items()}
    after = stored(broker, "c")
    assert set(after) == expected(acked, active_from)  # the latest per key, and the active segment untouched
    assert all(after[at] == acked[at] for at in after)  # each at its original offset
    latest = {key: at for at, (key, _) in sorted(acked.items())}  # a key lives in one partition
    assert set(latest.values()) <= set(after)  # every key's latest value survives
    assert len(after) < 2050 // 10  # compacted: the 2,000 records are gone but for their keys' latest
    assert all(broker.list_offset("c", p, "earliest") == 0 for p in range(3))  # the log start never moves
    assert run_job("compact", broker).commits == 0  # nothing left to drop
    assert_topic_intact(make_broker.root, "c", make_broker.storage, allow_gaps=True)
