"""The `lakelog` data source: batch and streaming reads in the schema of Spark's Kafka source.

Built on PySpark's Python data source API (Spark 4.0+): no JVM jars. The
driver plans offset ranges from the segment index; executors read the
parquet files of their range with pyarrow and return Arrow batches.
Spark 4.0 has no filter pushdown for Python sources, so the offset options
(`startingOffsets`, `endingOffsets`, timestamps) are what prunes files.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from lakelog.platform.broker.reader import TopicReader
from lakelog.platform.records import TopicPartition
from lakelog.spark_jobs import typed
from lakelog.spark_jobs.options import SourceOptions
from lakelog.spark_jobs.ranges import OffsetRange, check_start_not_after_end, plan_ranges
from lakelog.spark_jobs.scan import HEADERS_DDL, KAFKA_DDL, kafka_arrow_schema, read_range, spare_zip_rereads

log = logging.getLogger(__name__)


class RangePartition(InputPartition):
    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.rng = rng


def range_of(partition: InputPartition) -> OffsetRange:
    """The range of a partition the reader planned (Spark hands each task one of those back)."""
    if not isinstance(partition, RangePartition):
        raise TypeError(f"the lakelog reader reads the partitions it planned, not a {type(partition).__name__}")
    return partition.rng


class LakelogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "lakelog"

    # Each method below is the last of this package's code that a planner worker runs for a query (schema:
    # `create_data_source`; partitions, streamReader: `plan_data_source_read`). Those workers are reused
    # and call `importlib.invalidate_caches()` first thing, as the executors' do: sparing their next run
    # the re-read of the zips on their path took most of their CPU per query (see scan.spare_zip_rereads).

    def schema(self) -> str | StructType:
        include_headers = str(self.options.get("includeHeaders", "false")).lower() == "true"
        try:
            if typed.requested(self.options):  # Kafka's columns, then `value_typed` (typed.py)
                return typed.spark_schema(kafka_arrow_schema(include_headers), typed.typed_type(self.options))
            return KAFKA_DDL + (HEADERS_DDL if include_headers else "")
        finally:
            spare_zip_rereads()

    def reader(self, schema: StructType) -> DataSourceReader:
        return LakelogBatchReader(SourceOptions.parse(self.options, streaming=False), typed.declared_type(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            return LakelogStreamReader(SourceOptions.parse(self.options, streaming=True), typed.declared_type(schema))
        finally:
            spare_zip_rereads()

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from lakelog.spark_jobs.sink import LakelogBatchWriter

        return LakelogBatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from lakelog.spark_jobs.sink import LakelogStreamWriter

        return LakelogStreamWriter(dict(self.options), schema, overwrite)


class LakelogBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions, value_typed: pa.DataType | None = None) -> None:
        self.options = options
        self.value_typed = value_typed  # the `value_typed` column's declared type; None: Kafka's columns only

    def partitions(self) -> list[InputPartition]:
        try:
            reader, tps = self.options.connection.planning_reader(self.options.subscription.resolve)
            starts = self.options.starting.resolve(reader, tps, "earliest")
            ends = self.options.ending.resolve(reader, tps, "latest")
            check_start_not_after_end(starts, ends, self.options.starting.option, self.options.ending.option)
            ranges = plan_ranges(reader, starts, ends, self.options.fail_on_data_loss, self.options.min_partitions,
                                 self.options.max_records_per_partition)
        finally:
            spare_zip_rereads()
        return [RangePartition(r) for r in ranges] or [RangePartition(_EMPTY)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rng = range_of(partition)
        if rng.size <= 0:
            return iter(())
        return read_range(self.options.connection, rng, self.options.include_headers, self.options.fail_on_data_loss,
                          self.value_typed)


_EMPTY = OffsetRange("", 0, 0, 0, "", ())  # Spark wants at least one partition


def offsets_json(positions: dict[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Kafka's per-partition offset JSON, in a stable order (Spark compares offsets as JSON text)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def positions_of(offsets: dict) -> dict[TopicPartition, int]:
    return {(t, int(p)): int(o) for t, ps in (offsets or {}).items() for p, o in ps.items()}


class LakelogStreamReader(DataSourceStreamReader):
    """Streaming offsets are Kafka's JSON: {"topic": {"0": next offset, ...}}.

    Spark 4.0's Python API has no admission control (`latestOffset` gets no
    start), so `maxOffsetsPerTrigger` and `minOffsetsPerTrigger` are applied
    from the position this reader last planned: the starting offsets on a fresh
    query; after a restart Spark hands the checkpointed position over through
    `partitions(end, end)` (AcceptsLatestSeenOffset) before it asks for offsets.
    Spark 4.0 also gives a Python source no way to see its trigger, and runs
    Trigger.AvailableNow as one batch for it (see the README).
    """

    def __init__(self, options: SourceOptions, value_typed: pa.DataType | None = None) -> None:
        self.options = options
        self.value_typed = value_typed  # fixed for the query: files of a later, wider type are read as this one
        self._reader: TopicReader | None = None
        self._position: dict[TopicPartition, int] | None = None
        self._initial: dict[TopicPartition, int] | None = None
        self._gate = (BatchGate(options.min_offsets_per_trigger, options.max_trigger_delay_ms)
                      if options.min_offsets_per_trigger is not None else None)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_reader": None}  # open tables are never shipped to executors

    @property
    def reader(self) -> TopicReader:
        if self._reader is None:
            self._reader = self.options.connection.reader()
        return self._reader

    def _starting_positions(self) -> dict[TopicPartition, int]:
        """Resolved once per run: Spark asks for the latest offset before the initial one on a fresh query,
        and `latest` or a timestamp resolved twice could disagree."""
        if self._initial is None:
            tps = self.options.subscription.resolve(self.reader)
            self._initial = self.options.starting.resolve(self.reader, tps, "latest")
        return dict(self._initial)

    def initialOffset(self) -> dict:
        return offsets_json(self._starting_positions())

    def latestOffset(self) -> dict:
        tps = self.options.subscription.resolve(self.reader)
        ends = self._latest(tps)
        limit = self.options.max_offsets_per_trigger
        if limit is None and self._gate is None:
            return offsets_json(ends)
        base = dict(self._position) if self._position is not None else self._starting_positions()
        for tp in tps:
            if tp not in base:  # a partition or topic added since: read it from its start
                base[tp] = self.reader.list_offset(tp[0], tp[1], "earliest")
        if self._gate is not None and self._gate.hold(base, ends, _now_ms()):
            return offsets_json(base)  # the same offsets as last time: Spark runs no batch
        return offsets_json(ends if limit is None else rate_limit(base, ends, limit))

    def _latest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's last stable offset, from one refresh of each topic's table (not one a partition:
        on object storage each refresh is a request)."""
        ends = {}
        for topic in sorted({t for t, _ in tps}):
            topic_log = self.reader.topic_log(topic)
            topic_log.refresh()
            ends.update({tp: topic_log.last_stable_offset(tp[1]) for tp in tps if tp[0] == topic})
        return ends

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        starts, ends = positions_of(start), positions_of(end)
        self._position = dict(ends)
        for topic in {t for t, _ in ends}:  # the snapshot latestOffset just read holds the files, unless restarted
            topic_log = self.reader.topic_log(topic)
            if any(o > topic_log.log_end_offset(p) for (t, p), o in ends.items() if t == topic):
                topic_log.refresh()
        ranges = plan_ranges(self.reader, starts, ends, self.options.fail_on_data_loss, self.options.min_partitions,
                             self.options.max_records_per_partition)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rng = range_of(partition)
        return read_range(self.options.connection, rng, self.options.include_headers, self.options.fail_on_data_loss,
                          self.value_typed)

    def commit(self, end: dict) -> None:
        self._position = positions_of(end)

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _now_ms() -> float:
    return time.time() * 1000


@dataclass
class BatchGate:
    """`minOffsetsPerTrigger` with `maxTriggerDelay`, as Kafka's delayBatch: hold a batch back while fewer
    than `min_offsets` new offsets exist, unless `max_delay_ms` passed since the last batch started.

    `last_trigger_ms` starts at 0, so the first batch of each run is never held (as in Kafka).
    """

    min_offsets: int
    max_delay_ms: int
    last_trigger_ms: float = 0.0

    def hold(self, base: dict[TopicPartition, int], ends: dict[TopicPartition, int], now_ms: float) -> bool:
        if now_ms - self.last_trigger_ms >= self.max_delay_ms:
            self.last_trigger_ms = now_ms
            return False
        new = sum(end - base.get(tp, 0) for tp, end in ends.items())
        if new < self.min_offsets:
            return True
        self.last_trigger_ms = now_ms
        return False


def rate_limit(base: dict[TopicPartition, int], ends: dict[TopicPartition, int],
               limit: int) -> dict[TopicPartition, int]:
    """At most `limit` offsets in all, shared in proportion to each partition's backlog (as Kafka does)."""
    backlog = {tp: max(ends[tp] - base.get(tp, ends[tp]), 0) for tp in ends}
    total = sum(backlog.values())
    if total <= limit:
        return dict(ends)
    out = {}
    for tp, end in ends.items():
        begin = base.get(tp, end)
        share = limit * backlog[tp] / total
        step = int(share) if share >= 1 else (1 if backlog[tp] else 0)
        out[tp] = max(begin, min(end, begin + step))
    return out
