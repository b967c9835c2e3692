"""A producer's history on a journaled leader: the table's rows plus its batches acknowledged in the journal
and not yet committed, each (partition, offset) once; the producer state rebuilt from it answers a retry
of a batch still in the journal as a duplicate."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.platform.errors import OutOfOrderSequence
from lakelog.platform.journal.objects import Entry
from lakelog.platform.journal.producer_history import journaled_history, merged, pending_rows
from lakelog.platform.journal.topic_state import Acknowledged, JournalTopic
from lakelog.platform.log.producers import CONTENT_COLUMNS, PRODUCER_COLUMNS
from lakelog.platform.produce.producer_state import ProducerStateManager
from lakelog.platform.records import ProducerBatch
from lakelog.schemas import TOPIC_FILE_SCHEMA, TOPIC_SCHEMA

HISTORY_SCHEMA = pa.schema([TOPIC_FILE_SCHEMA.field(n) for n in PRODUCER_COLUMNS] + [("partition", pa.int32())])


def records(partition: int, base: int, rows: list[tuple[int | None, int]]) -> pa.Table:
    """TOPIC_SCHEMA records at offsets base.. of (producer id, sequence) rows, epoch 0."""
    n = len(rows)
    columns = {"partition": [partition] * n, "offset": list(range(base, base + n)), "timestamp": [0] * n,
               "timestamp_type": [0] * n, "key": [None] * n, "value": [b"v"] * n, "headers": [None] * n,
               "producer_id": [r[0] for r in rows], "producer_epoch": [0 if r[0] is not None else None for r in rows],
               "sequence": [r[1] if r[0] is not None else None for r in rows]}
    return pa.table(columns, schema=TOPIC_SCHEMA)


def acknowledged(partition: int, base: int, rows: list[tuple[int | None, int]]) -> Acknowledged:
    return Acknowledged(("r", 0), Entry("t", partition, base, len(rows)), records(partition, base, rows))


def as_history(table: pa.Table) -> pa.Table:
    return table.select(HISTORY_SCHEMA.names).cast(HISTORY_SCHEMA)


def test_pending_rows_are_the_producers_own_in_the_tables_columns() -> None:
    items = [acknowledged(0, 0, [(7, 0), (None, 0), (9, 0)]), acknowledged(1, 4, [(7, 1), (7, 2)])]
    rows = pending_rows(items, 7, HISTORY_SCHEMA)
    assert rows.schema == HISTORY_SCHEMA
    assert list(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), rows["sequence"].to_pylist())) == [
        (0, 0, 0), (1, 4, 1), (1, 5, 2)]
    assert pending_rows(items, 8, HISTORY_SCHEMA).num_rows == 0
    with_content = pa.schema([*HISTORY_SCHEMA, *(TOPIC_FILE_SCHEMA.field(n) for n in CONTENT_COLUMNS)])
    assert pending_rows(items, 9, with_content)["value"].to_pylist() == [b"v"]  # an Idempotency-Key's compare


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30)), unique=True, max_size=20),
       st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30)), unique=True, max_size=20))
def test_merged_holds_each_partition_offset_once(in_table: list[tuple[int, int]],
                                                pending: list[tuple[int, int]]) -> None:
    def table_of(pairs: list[tuple[int, int]]) -> pa.Table:
        parts = [as_history(records(p, o, [(7, o)])) for p, o in pairs]
        return pa.concat_tables(parts) if parts else HISTORY_SCHEMA.empty_table()

    out = merged(table_of(in_table), table_of(pending))
    pairs = list(zip(out["partition"].to_pylist(), out["offset"].to_pylist()))
    assert sorted(pairs) == sorted(set(in_table) | set(pending))
    assert pairs[:len(in_table)] == in_table  # the table's rows first, as read


def test_a_rebuilt_state_answers_a_retry_of_a_batch_still_in_the_journal() -> None:
    in_table = as_history(records(0, 0, [(7, 0), (7, 1)]))
    topic = JournalTopic("t", lambda partition: 2)
    topic.acknowledged([acknowledged(0, 2, [(7, 2), (7, 3)])])
    state = ProducerStateManager(journaled_history(lambda pid, content: in_table, topic))
    retry = state.check(ProducerBatch(7, 0, 2), 2, {})
    assert retry is not None and retry.duplicate and retry.offsets.tolist() == [2, 3]
    assert state.check(ProducerBatch(7, 0, 4), 1, {}) is None  # the next sequence follows the journal's
    state.forget(7)
    with pytest.raises(OutOfOrderSequence, match="expected 4, got 5"):
        state.check(ProducerBatch(7, 0, 5), 1, {})
    # Committed meanwhile: in the table and (for a moment) still pending; the batch counts once.
    both = pa.concat_tables([in_table, as_history(records(0, 2, [(7, 2), (7, 3)]))])
    state = ProducerStateManager(journaled_history(lambda pid, content: both, topic))
    assert state.check(ProducerBatch(7, 0, 2), 2, {}).offsets.tolist() == [2, 3]  # type: ignore[union-attr]
