"""The maintenance jobs on topics receiving produce traffic at the same time."""

from __future__ import annotations

import threading
import os
import time
from collections import Counter

import pytest

from lakelog.compaction import closed_segments
from lakelog.platform import Record
from lakelog.platform.errors import OffsetOutOfRange
from lakelog.spark_jobs.jobs import run_job
from delta_readers import assert_duckdb_agrees
from tests.spark.conftest import all_records


class Producer(threading.Thread):
    """Produces small batches until stopped; remembers every acknowledged (partition, offset, value)."""

    def __init__(self, broker, topic: str, keys: int = 20, timestamp_ms=None) -> None:
        super().__init__(daemon=True)
        self.broker, self.topic, self.keys, self.timestamp_ms = broker, topic, keys, timestamp_ms
        self.acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self.stop = threading.Event()
        self.n = 0

    def produce(self, count: int) -> None:
        records = [Record(f"v{self.n + i}".encode(), key=f"k{(self.n + i) % self.keys}".encode(),
                          timestamp_ms=self.timestamp_ms) for i in range(count)]
        result = self.broker.produce(self.topic, records)
        for record, (p, o, _) in zip(records, result.records()):
            self.acked[(p, o)] = (record.key, record.value)
        self.n += count

    def run(self) -> None:
        while not self.stop.is_set():
            self.produce(7)
            time.sleep(0.01)


def fill(broker, topic: str, batches: int, per_batch: int = 30, **kw) -> Producer:
    producer = Producer(broker, topic, **kw)
    for _ in range(batches):
        producer.produce(per_batch)
    return producer


def fill_rolled(broker, spark, topic: str, rounds: int, batches: int, **kw) -> Producer:
    """`rounds` fills, each rolled: a flush of several partitions is one file shared by them (layout 2),
    which retention and compaction leave to the roll; each roll turns one fill into a file per partition."""
    producer = Producer(broker, topic, **kw)
    for _ in range(rounds):
        for _ in range(batches):
            producer.produce(30)
        run_job("roll", broker, spark)
    return producer


def run_with_traffic(job: str, broker, spark, producer: Producer, **kw):
    producer.start()
    try:
        time.sleep(0.2)
        report = run_job(job, broker, spark, **kw)
        time.sleep(0.2)
    finally:
        producer.stop.set()
        producer.join()
    return report


def test_roll_keeps_every_record_at_its_offset(spark, broker, root):
    broker.create_topic("t", 2, {"segment.bytes": "20000"})
    producer = fill(broker, "t", 30)
    files_before = sum(len(broker.topic_log("t").segments(p)) for p in range(2))
    old_end = {p: broker.list_offset("t", p, "latest") for p in range(2)}
    report = run_with_traffic("roll", broker, spark, producer)
    assert report.commits >= 1 and report.files_removed > report.files_added
    records = all_records(broker, "t")
    assert [(r[1], r[2]) for r in records] == sorted(producer.acked)  # each offset once, none lost
    assert all(producer.acked[(r[1], r[2])] == (r[3], r[4]) for r in records)
    files_after = sum(1 for p in range(2) for f in broker.topic_log("t").segments(p) if f.min_offset < old_end[p])
    assert files_after < files_before  # the same records, in fewer files
    assert_duckdb_agrees(root, "t", acked={where: value for where, (_, value) in producer.acked.items()})
    run_job("roll", broker, spark)  # the files produced during the first run
    version = broker.topic_log("t").version
    assert run_job("roll", broker, spark).commits == 0  # idempotent
    assert broker.topic_log("t").version == version


def test_compaction_keeps_latest_per_key_and_offsets(spark, broker, root):
    broker.create_topic("c", 2, {"cleanup.policy": "compact", "delete.retention.ms": "3600000"})
    first = broker.produce("c", [Record(b"soon deleted", key=b"gone")])
    producer = fill(broker, "c", 12, keys=9)
    tombstone = broker.produce("c", [Record(None, key=b"gone")])  # recent: kept for delete.retention.ms
    for result, value in ((first, b"soon deleted"), (tombstone, None)):
        producer.acked[(int(result.partitions[0]), int(result.offsets[0]))] = (b"gone", value)
    run_job("roll", broker, spark)  # compaction cleans files of one partition: the roll splits shared ones
    report = run_with_traffic("compact", broker, spark, producer)
    assert report.commits == 2 and report.records_out < report.records_in
    compacted_end = {plan.partition: plan.inputs[-1].max_offset for plan in report.plans}
    latest: dict[tuple[int, bytes], int] = {}
    for (p, o), (key, _) in producer.acked.items():
        if o <= compacted_end[p]:
            latest[(p, key)] = max(latest.get((p, key), -1), o)
    expected = sorted({(p, o) for (p, key), o in latest.items()}
                      | {(p, o) for (p, o) in producer.acked if o > compacted_end[p]})
    after = all_records(broker, "c")
    assert [(r[1], r[2]) for r in after] == expected  # latest per key in the compacted range, the rest untouched
    assert all(producer.acked[(r[1], r[2])] == (r[3], r[4]) for r in after)  # same record at its original offset
    assert_duckdb_agrees(root, "c", acked={where: producer.acked[where][1] for where in expected})  # after a DELETE
    gone = [r[4] for r in after if r[3] == b"gone"]
    assert gone == [None]  # the young tombstone survived, the value it deletes did not
    assert broker.list_offset("c", 0, "earliest") == 0  # compaction never moves the log start
    run_job("compact", broker, spark)  # the records produced during the first run
    version = broker.topic_log("c").version
    run_job("compact", broker, spark)
    assert broker.topic_log("c").version == version  # nothing left to drop: nothing committed


def test_old_tombstones_are_dropped(spark, broker):
    broker.create_topic("c", 1, {"cleanup.policy": "compact", "delete.retention.ms": "1000"})
    old = int(time.time() * 1000) - 60_000
    broker.produce("c", [Record(b"x", key=b"a", timestamp_ms=old), Record(b"y", key=b"b", timestamp_ms=old)])
    broker.produce("c", [Record(None, key=b"a", timestamp_ms=old)])
    broker.produce("c", [Record(b"z", key=b"c")])  # the active segment
    run_job("compact", broker, spark)
    assert [(r[2], r[3], r[4]) for r in all_records(broker, "c")] == [(1, b"b", b"y"), (3, b"c", b"z")]


def test_retention_limits_and_consumer_below_log_start(spark, broker, root):
    now = int(time.time() * 1000)
    broker.create_topic("r", 2, {"retention.ms": "3600000", "retention.bytes": "9000"})
    old = fill_rolled(broker, spark, "r", 1, 4, timestamp_ms=now - 7_200_000)  # two hours old: past retention.ms
    fresh = fill_rolled(broker, spark, "r", 1, 8)
    producer = Producer(broker, "r")
    report = run_with_traffic("retention", broker, None, producer)
    assert report.commits == 2
    run_job("retention", broker)  # without traffic: the limits below hold exactly
    topic_log = broker.topic_log("r")
    for p in range(2):
        files = topic_log.segments(p)
        assert all(f.max_timestamp_ms >= now - 3_600_000 for f in files)  # nothing past retention.ms
        closed = sum(f.size_bytes for f in closed_segments(files))
        assert closed <= 9000  # closed segments within retention.bytes (the active one is never removed)
        start = broker.list_offset("r", p, "earliest")
        assert start > 0
        with pytest.raises(OffsetOutOfRange) as caught:  # a consumer below the new log start
            broker.fetch("r", p, start - 1)
        assert caught.value.log_start_offset == start
        reset = broker.list_offset("r", p, "earliest")  # auto.offset.reset=earliest
        assert broker.fetch("r", p, reset).records.column("offset")[0].as_py() == start
    acked = {**old.acked, **fresh.acked, **producer.acked}
    remaining = all_records(broker, "r")
    assert all(acked[(r[1], r[2])] == (r[3], r[4]) for r in remaining)
    starts = {p: broker.list_offset("r", p, "earliest") for p in range(2)}
    assert sorted((r[1], r[2]) for r in remaining) == sorted(k for k in acked if k[1] >= starts[k[0]])
    assert_duckdb_agrees(root, "r", acked={k: value for k, (_, value) in acked.items() if k[1] >= starts[k[0]]})
    version = topic_log.version
    assert run_job("retention", broker).commits == 0 and topic_log.version == version


def test_topic_wide_retention_cap(spark, broker):
    broker.create_topic("r", 3, {"retention.topic.bytes": "12000"})
    fill_rolled(broker, spark, "r", 3, 4)
    run_job("retention", broker)
    topic_log = broker.topic_log("r")
    topic_log.refresh()
    closed = sum(f.size_bytes for p in range(3) for f in closed_segments(topic_log.segments(p)))
    assert closed <= 12000
    assert all(broker.list_offset("r", p, "earliest") > 0 for p in range(3))


def test_vacuum_waits_for_file_delete_delay(spark, broker, root):
    broker.create_topic("v", 1, {"retention.bytes": "0", "file.delete.delay.ms": "600000"})
    fill(broker, "v", 4)
    removed = run_job("retention", broker).plans[0].inputs
    paths = [f"{broker.topic_log('v').uri}/{f.path}" for f in removed]
    assert run_job("vacuum", broker).files_deleted == 0
    assert all(broker.storage.size(p) is not None for p in paths)  # readers in flight can still finish
    assert run_job("vacuum", broker, now_ms=int(time.time() * 1000) + 700_000).files_deleted == len(paths)
    assert not any(broker.storage.size(p) is not None for p in paths)
    assert Counter(r[1] for r in all_records(broker, "v")) == Counter({0: 30})  # the active segment stays


def test_vacuum_deletes_unreferenced_files_after_a_grace_period(spark, broker):
    broker.create_topic("o", 1, {"file.delete.delay.ms": "0"})
    fill(broker, "o", 2)
    log = broker.topic_log("o")
    orphan = f"{log.uri}/part-00000-lost-commit-race.snappy.parquet"
    live = [f"{log.uri}/{f.path}" for f in log.segments(0)]
    with open(live[0], "rb") as source, open(orphan, "wb") as copy:  # a writer's files whose commit lost
        copy.write(source.read())
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    now = int(time.time() * 1000)
    assert run_job("vacuum", broker, now_ms=now).files_deleted == 0  # first seen now: not yet
    assert run_job("vacuum", broker, now_ms=now + 16 * 60_000).files_deleted == 1
    assert not os.path.exists(orphan) and all(os.path.exists(p) for p in live)
    assert Counter(r[1] for r in all_records(broker, "o")) == Counter({0: 2 * 30})


def test_dry_run_changes_nothing_and_unknown_topic_fails(spark, broker):
    broker.create_topic("d", 1, {"retention.bytes": "0"})
    fill(broker, "d", 3)
    version = broker.topic_log("d").version
    report = run_job("retention", broker, dry_run=True)
    assert report.plans and report.commits == 0 and broker.topic_log("d").version == version
    with pytest.raises(Exception, match="UNKNOWN|unknown|not exist"):
        run_job("roll", broker, spark, topics=["no-such"])
