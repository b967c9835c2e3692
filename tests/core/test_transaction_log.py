"""Transactions in a topic's log: offsets reserved at produce, records in the table only once committed.

Against a real broker on a local root: a reservation takes offsets without writing records, fetches stop
at the oldest open transaction (the last stable offset), a commit fills the records in at their reserved
offsets, an abort leaves an empty placeholder (its offsets never reused), each end takes one more offset
for its marker (an empty file too, as Kafka's control batch takes an offset), a late batch of an ended
transaction is refused, fills are done once, and a restarted node knows all of it from the table alone.
Every test ends with the offset scan and DuckDB's independent read.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from delta_readers import assert_duckdb_agrees
from lakelog.platform import Broker, Record
from lakelog.platform.deadline import Deadline
from lakelog.platform.log import TopicLog
from lakelog.platform.broker.reader import TopicReader
from lakelog.platform.records import Marker
from lakelog.platform.log.reservations import StagedBatch, TransactionEnded
from lakelog.platform.segments.segment import TableLayout
from lakelog.schemas import TOPIC_FILE_SCHEMA
from log_check import aborted_ranges, assert_topic_intact

LONG = 30_000


def staged(values: list[bytes], first: int, producer_id: int = 7) -> pa.Table:
    n = len(values)
    return pa.table({
        "offset": pa.array(range(first, first + n), pa.int64()),
        "timestamp": pa.array([1_700_000_000_000] * n, pa.timestamp("ms", tz="UTC")),
        "timestamp_type": pa.array([0] * n, pa.int8()),
        "key": pa.array([None] * n, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "headers": pa.array([[]] * n, TOPIC_FILE_SCHEMA.field("headers").type),
        "producer_id": pa.array([producer_id] * n, pa.int64()),
        "producer_epoch": pa.array([0] * n, pa.int16()),
        "sequence": pa.array(range(n), pa.int32()),
    }).select(TOPIC_FILE_SCHEMA.names).cast(TOPIC_FILE_SCHEMA)


def fetched(broker: Broker, offset: int = 0) -> list[bytes]:
    """Every record a consumer reads from `offset` on, fetch after fetch (an answer may stop early: at the
    end of the tail cache's run, at a gap)."""
    values: list[bytes] = []
    while True:
        result = broker.fetch("t", 0, offset, 100)
        if result.next_offset is None:
            return values
        values += result.records.column("value").to_pylist()
        offset = result.next_offset


def table_values(root: str) -> list[bytes]:
    table = DeltaTable(f"{root}/topics/t").to_pyarrow_table(columns=["offset", "value"]).sort_by("offset")
    return table.column("value").to_pylist()


@pytest.mark.parametrize("layout", [1, 2])
def test_commit_and_abort_fill_the_reserved_offsets(tmp_path, layout: int) -> None:
    root = str(tmp_path / "data")
    deadline = lambda: Deadline.after_ms(LONG)  # noqa: E731
    with Broker(root=root) as broker:
        if layout == 1:
            TopicLog.create_table(broker.storage, "t", TableLayout.PARTITIONED)  # as lakelog created tables before
        broker.create_topic("t", 1)
        broker.produce("t", [Record(b"a"), Record(b"b")])
        log = broker.topic_log("t")
        assert log.reserve(0, 3, 7, 1, 0, deadline()) == 2
        assert log.reserve(0, 3, 7, 1, 0, deadline()) == 2  # a retried batch: the same offsets
        broker.produce("t", [Record(b"c")])  # offset 5, committed after the open transaction's offsets
        assert log.last_stable_offset(0) == 2 and log.log_end_offset(0) == 6
        result = broker.fetch("t", 0, 0, 100)
        assert result.records.column("value").to_pylist() == [b"a", b"b"]
        assert (result.high_watermark, result.last_stable_offset) == (6, 2)
        assert fetched(broker, 2) == []  # waits at the open transaction: c is held back
        assert table_values(root) == [b"a", b"b", b"c"]  # the table holds no open record
        assert TopicReader(broker.storage).list_offset("t", 0, "latest") == 2  # the Spark source's end: the LSO
        assert log.reserve(0, 2, 8, 1, 0, deadline()) == 6  # another producer's transaction

        xyz = StagedBatch(0, 3, lambda: staged([b"x", b"y", b"z"], -1))  # offsets are set by the fill
        never_reserved = StagedBatch(1, 1, lambda: staged([b"never acknowledged"], -1))
        assert log.fill(0, 7, 1, [xyz, never_reserved], deadline(), 70, True)
        assert not log.fill(0, 7, 1, [xyz], deadline(), 70, True)  # once
        assert log.log_end_offset(0) == 9  # the commit marker at 8
        assert log.last_stable_offset(0) == 6  # producer 8's transaction is still open
        assert fetched(broker) == [b"a", b"b", b"x", b"y", b"z", b"c"]
        with pytest.raises(TransactionEnded):
            log.reserve(0, 1, 7, 1, 5, deadline())  # a late batch of the ended transaction

        assert log.fill(0, 8, 1, [StagedBatch(0, 2, None)], deadline(), 80, False)  # abort
        assert log.last_stable_offset(0) == log.log_end_offset(0) == 10  # its marker at 9
        assert [log.marker_at(0, o) for o in (7, 8, 9)] == [Marker(7, 80, False), Marker(8, 70, True),
                                                            Marker(9, 80, False)]
        skipped = broker.fetch("t", 0, 6, 100)
        assert skipped.records.num_rows == 0 and skipped.skip_to == 10  # one answer moves past them all
        assert skipped.marker == Marker(9, 80, False)  # the last one passed, for Kafka's control batch
        broker.produce("t", [Record(b"d")])
        assert fetched(broker, 6) == [b"d"]  # the aborted offsets and the markers are skipped, not reused
        assert fetched(broker) == [b"a", b"b", b"x", b"y", b"z", b"c", b"d"]
    assert table_values(root) == [b"a", b"b", b"x", b"y", b"z", b"c", b"d"]
    assert aborted_ranges(root, "t") == {0: {6, 7, 8, 9}}
    assert_topic_intact(root, "t")
    assert_duckdb_agrees(root, "t")
    with Broker(root=root) as again:  # everything known from the table alone
        assert again.topic_log("t").last_stable_offset(0) == 11
        assert fetched(again) == [b"a", b"b", b"x", b"y", b"z", b"c", b"d"]


def test_an_open_transaction_survives_a_restart_and_holds_back_the_log(tmp_path) -> None:
    root = str(tmp_path / "data")
    with Broker(root=root) as broker:
        broker.create_topic("t", 1)
        log = broker.topic_log("t")
        assert log.reserve(0, 2, 9, 3, 0, Deadline.after_ms(LONG)) == 0  # the partition's first records
        broker.produce("t", [Record(b"later")])
    with pytest.raises(AssertionError, match="still open from offset 0"):
        assert_topic_intact(root, "t")  # an open transaction's offsets are a hole the scan reports
    with Broker(root=root) as again:
        log = again.topic_log("t")
        assert (log.log_start_offset(0), log.last_stable_offset(0)) == (0, 0)  # not 2: nothing skipped
        assert fetched(again) == []
        log.fill(0, 9, 3, [StagedBatch(0, 2, lambda: staged([b"p", b"q"], 0, 9))], Deadline.after_ms(LONG), 90, True)
        assert fetched(again) == [b"p", b"q", b"later"]
    assert_topic_intact(root, "t")
    assert_duckdb_agrees(root, "t")
