"""Reading one segment (a data file of one partition, sorted by offset): only the row groups that may
hold the offsets asked for, chosen by their offset statistics, then cut to exactly those offsets.

The log's fetch path and the Spark scan both read through here.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakelog.schemas import TOPIC_FILE_SCHEMA


def row_groups_between(metadata: pq.FileMetaData, start: int, end: int | None = None) -> list[int]:
    """Row groups whose offsets may fall in [start, end) (end None: no upper bound)."""
    column = metadata.schema.names.index("offset")
    groups = []
    for i in range(metadata.num_row_groups):
        stats = metadata.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max or (stats.max >= start and (end is None or stats.min < end)):
            groups.append(i)
    return groups


def read_offsets(source: Any, start: int, end: int | None = None, columns: list[str] | None = None,
                 metadata: pq.FileMetaData | None = None) -> tuple[pa.Table, pq.FileMetaData]:
    """The records of [start, end) in an open segment file, and its footer (to cache for the next read)."""
    parquet = pq.ParquetFile(source, metadata=metadata)
    groups = row_groups_between(parquet.metadata, start, end)
    if not groups:
        empty = TOPIC_FILE_SCHEMA.empty_table()
        return (empty.select(columns) if columns else empty), parquet.metadata
    table = parquet.read_row_groups(groups, columns=columns)
    offsets = table.column("offset")
    if table.num_rows and (offsets[0].as_py() < start or (end is not None and offsets[-1].as_py() >= end)):
        keep = pc.greater_equal(offsets, start)
        if end is not None:
            keep = pc.and_(keep, pc.less(offsets, end))
        table = table.filter(keep)
    return table, parquet.metadata
