"""The sink: batch writes, and a streaming query killed mid-way and restarted writes every record once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from lakelog.platform import Record
from lakelog.platform.partitioner import partition_for_key
from tests.spark.conftest import all_records
from tests.spark.sink_query import copy_query
from log_check import assert_root_intact
from tests.patience import STUCK_S


def test_batch_write_uses_the_partitioner_and_explicit_partitions(spark, root, broker):
    broker.create_topic("a", 4)
    broker.create_topic("b", 2)
    rows = [("a", f"key-{i}", f"value-{i}", None) for i in range(40)] + \
           [("b", None, f"pinned-{i}", 1) for i in range(5)]
    df = spark.createDataFrame(rows, "topic string, key string, value string, partition int")
    df.write.format("lakelog").mode("append").option("lakelog.root", root).save()
    a = all_records(broker, "a")
    assert sorted(r[4] for r in a) == sorted(f"value-{i}".encode() for i in range(40))
    assert all(r[1] == partition_for_key(r[3], 4) for r in a)  # Kafka's murmur2, as the HTTP tier
    b = all_records(broker, "b")
    assert [(r[1], r[4]) for r in b] == sorted((1, f"pinned-{i}".encode()) for i in range(5))


def test_bad_sink_input_is_refused_before_writing(spark, root, broker):
    broker.create_topic("a", 1)
    no_value = spark.createDataFrame([("a", "k")], "topic string, key string")
    with pytest.raises(Exception, match="needs a 'value' column"):
        no_value.write.format("lakelog").mode("append").option("lakelog.root", root).save()
    no_topic = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception, match="'topic' column or the 'topic' option"):
        no_topic.write.format("lakelog").mode("append").option("lakelog.root", root).save()
    assert broker.list_offset("a", 0, "latest") == 0


def _produce_src(broker, start: int, count: int) -> None:
    broker.produce("src", [Record(f"r{i}".encode(), key=f"k{i % 13}".encode(), headers=[("n", str(i).encode())])
                           for i in range(start, start + count)])


@pytest.mark.slow
def test_sink_killed_mid_stream_writes_every_record_once(spark, root, broker, tmp_path):
    broker.create_topic("src", 2)
    broker.create_topic("dst", 3)
    for i in range(10):
        _produce_src(broker, i * 40, 40)
    checkpoint = str(tmp_path / "checkpoint")
    child = subprocess.Popen([sys.executable, str(Path(__file__).with_name("sink_query.py")), root, checkpoint],
                             cwd=str(Path(__file__).parents[2]), start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + STUCK_S
        while sum(broker.list_offset("dst", p, "latest") for p in range(3)) < 100:
            assert child.poll() is None, "the copy query process failed"
            assert time.monotonic() < deadline, "the copy query did not get going"
            time.sleep(0.1)
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the whole query process group: driver JVM and workers
        child.wait()
    # A crash between the sink's Delta commit and Spark's commit log makes Spark replay that batch:
    # drop the last commit-log entry to be sure the replay happens.
    commits = sorted((Path(checkpoint) / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    commits[-1].unlink()
    commits[-1].with_name(f".{commits[-1].name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of it

    query = copy_query(spark, root, checkpoint)
    query.processAllAvailable()
    _produce_src(broker, 400, 30)
    query.processAllAvailable()
    query.stop()

    src = Counter(r[4] for r in all_records(broker, "src"))
    dst = all_records(broker, "dst")
    assert Counter(r[4] for r in dst) == src  # every record once: none lost, none twice
    for p in range(3):
        offsets = [r[2] for r in dst if r[1] == p]
        assert offsets == list(range(len(offsets)))  # dense and unique
    assert_root_intact(root)
