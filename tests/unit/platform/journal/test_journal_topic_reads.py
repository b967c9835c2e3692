"""A journaled topic's reads from memory: the acknowledged, uncommitted records of a partition from an
offset, in offset order whatever order they were acknowledged in, up to `max_records` and the first gap."""

from __future__ import annotations

import pyarrow as pa

from lakelog.platform.journal.objects import Entry
from lakelog.platform.journal.topic_state import Acknowledged, JournalTopic


def acknowledged(partition: int, base: int, count: int, slot: int) -> Acknowledged:
    records = pa.table({"offset": pa.array(range(base, base + count), pa.int64())})
    return Acknowledged(("r1", slot), Entry("t", partition, base, count), records)


def offsets(table: pa.Table | None) -> list[int] | None:
    return None if table is None else table.column("offset").to_pylist()


def test_reads_follow_entries_in_offset_order_and_stop_at_a_gap() -> None:
    topic = JournalTopic("t", lambda partition: 0)
    # out of order, another partition between, 15..19 not acknowledged here
    topic.acknowledged([acknowledged(0, 10, 5, 1), acknowledged(1, 0, 3, 1), acknowledged(0, 0, 10, 2),
                        acknowledged(0, 20, 5, 3)])
    assert offsets(topic.read(0, 3, 100)) == list(range(3, 15))
    assert offsets(topic.read(0, 3, 4)) == [3, 4, 5, 6]
    assert offsets(topic.read(0, 15, 10)) is None
    assert offsets(topic.read(0, 22, 10)) == [22, 23, 24]
    assert offsets(topic.read(1, 1, 10)) == [1, 2]
    assert offsets(topic.read(2, 0, 10)) is None
    topic.drop(topic.pending())
    assert offsets(topic.read(0, 3, 100)) is None  # committed: read from the table


def test_a_claim_continues_after_pending_entries_the_table_lacks() -> None:
    """A claim reads offsets from the table's end again; entries still pending that the table lacks (carried
    over by a replica election) keep their offsets taken, while a table already past them wins."""
    table_ends = {0: 4, 1: 9}
    topic = JournalTopic("t", lambda partition: table_ends[partition])
    topic.acknowledged([acknowledged(0, 4, 3, 1), acknowledged(1, 2, 3, 1)])  # 4..6 in 0; 2..4 in 1 (in the table)
    topic.claimed("r2")
    assert (topic.claimed_by, topic.next_offset(0), topic.next_offset(1)) == ("r2", 7, 9)
    topic.drop(topic.pending())
    table_ends[0] = 7
    topic.claimed("r3")
    assert topic.next_offset(0) == 7
