"""Batch reads plan with a reader kept per process (Spark's planner workers are reused across queries): each
plan still sees every record committed before it, and a topic deleted and created again is read afresh."""

from __future__ import annotations

import json

import pyarrow as pa
from pyspark.sql.types import StructType

from lakelog.platform import Broker
from lakelog.spark_jobs.connection import Connection
from lakelog.spark_jobs.source import LakelogDataSource, range_of


def _produce(broker: Broker, topic: str, n: int, partitions: int) -> None:
    broker.produce(topic, pa.table({"key": [b"k"] * n, "value": [b"v"] * n,
                                    "partition": pa.array([i % partitions for i in range(n)], pa.int32())}))
    broker.flush()  # in the table, not only on the journal


def _plan(root: str, **options: str) -> list:
    reader = LakelogDataSource({"lakelog.root": root, "subscribe": "t", **options}).reader(StructType())
    return [range_of(p) for p in reader.partitions() if range_of(p).size > 0]


def _ten_records_planned(root: str, connection: Connection, broker: Broker) -> object:
    """Topic t (2 partitions) with 10 records, planned once; the connection's kept reader."""
    broker.create_topic("t", 2)
    _produce(broker, "t", 10, 2)
    assert sum(r.size for r in _plan(root)) == 10
    return connection.planning_reader(lambda reader: [("t", 0)])[0]


def test_a_kept_reader_plans_what_was_committed_since(tmp_path):
    root = str(tmp_path / "root")
    connection = Connection(root)
    with Broker(root=root, linger_ms=0) as broker:
        first = _ten_records_planned(root, connection, broker)

        _produce(broker, "t", 6, 2)
        # Offsets given as JSON resolve nothing (no listing of offsets): the files of the records committed
        # since the last plan are planned all the same.
        end = json.dumps({"t": {"0": 8, "1": 8}})
        ranges = _plan(root, startingOffsets=json.dumps({"t": {"0": 5, "1": 5}}), endingOffsets=end)
        assert [(r.start, r.end) for r in ranges] == [(5, 8), (5, 8)]
        assert all(r.files and max(f.max_offset for f in r.files) >= 7 for r in ranges)
        assert sum(r.size for r in _plan(root)) == 16
        assert connection.planning_reader(lambda reader: [("t", 0)])[0] is first  # kept, not opened again


def test_a_topic_created_again_is_planned_from_its_new_table(tmp_path):
    root = str(tmp_path / "root")
    connection = Connection(root)
    with Broker(root=root, linger_ms=0) as broker:
        first = _ten_records_planned(root, connection, broker)

        broker.delete_topic("t")
        broker.create_topic("t", 1)
        _produce(broker, "t", 3, 1)
        ranges = _plan(root)
        assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 0, 3)]
        assert connection.planning_reader(lambda reader: [("t", 0)])[0] is not first
