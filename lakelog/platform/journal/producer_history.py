"""A producer's history on a journaled topic's leader: its records in the table plus its acknowledged
batches still waiting in the journal's memory for their table commit. The producer state rebuilds from
this (after a forget or a reload), so a retry of a batch acknowledged only in the journal is answered as
a duplicate with its offsets instead of being admitted and written again at new offsets.

Threads: called from the producer state's rebuild (the journal's flush thread, which holds the topic's
`lock`, an RLock) and `_from_log`; takes the topic's `lock` only to copy its pending list.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakelog.platform.journal.topic_state import Acknowledged, JournalTopic
from lakelog.platform.produce.producer_state import ProducerLoader


def pending_rows(items: Iterable[Acknowledged], producer_id: int, schema: pa.Schema) -> pa.Table:
    """The rows of `producer_id` among acknowledged entries, in `schema` (the table history's columns)."""
    pieces = []
    for item in items:
        records = item.records
        mine = records.filter(pc.equal(records.column("producer_id"), producer_id))
        if mine.num_rows:
            pieces.append(mine.select(schema.names).cast(schema))
    return pa.concat_tables(pieces) if pieces else schema.empty_table()


def merged(table: pa.Table, pending: pa.Table) -> pa.Table:
    """The table's history plus the pending rows it does not hold yet (an entry just committed is in both
    for a moment: kept once, by (partition, offset))."""
    if pending.num_rows == 0:
        return table
    if table.num_rows == 0:
        return pending
    keep = np.ones(pending.num_rows, dtype=bool)
    pending_partitions = pending.column("partition").to_numpy()
    pending_offsets = pending.column("offset").to_numpy()
    table_partitions = table.column("partition").to_numpy()
    table_offsets = table.column("offset").to_numpy()
    for partition in np.unique(pending_partitions):
        here = pending_partitions == partition
        keep[here] = ~np.isin(pending_offsets[here], table_offsets[table_partitions == partition])
    return pa.concat_tables([table, pending.filter(pa.array(keep))])


def journaled_history(table_history: ProducerLoader, state: JournalTopic) -> ProducerLoader:
    """`table_history` extended with the topic's pending journal entries. The pending list is copied before
    the table is read: an entry committed in between is then in the table (the committer drops it from
    memory only after its commit is in this node's log), so none is missed."""

    def load(producer_id: int, content: bool) -> pa.Table:
        waiting = state.pending()
        table = table_history(producer_id, content)
        return merged(table, pending_rows(waiting, producer_id, table.schema))

    return load
