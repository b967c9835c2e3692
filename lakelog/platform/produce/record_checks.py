"""The checks a topic makes of the records it is given, against its config, in one place (`validate_records`):
sizes against `max.message.bytes`, a key on every record of a compacted topic, timestamps. Each names the first
bad record by its place in the call; a refused call writes nothing.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakelog.platform.catalog.topic_config import TimestampType, TopicConfig
from lakelog.platform.errors import InvalidTimestamp, RecordsRefused, RecordTooLarge

# The largest timestamp every reader of a topic table can hold: 9999-12-31T23:59:59.999Z. Delta's
# statistics are ISO dates (four-digit years), delta-rs stores microseconds, Spark's TimestampType
# ends at year 9999; a larger value would break the commit's bookkeeping or its readers.
MAX_TIMESTAMP_MS = 253_402_300_799_999
SHOWN_RECORD_ERRORS = 3  # Kafka's message names at most the first three bad records


def int64_values(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A column of 64-bit values without nulls (offsets, timestamps) as numpy int64, copying only when it is
    in several chunks."""
    array = column if isinstance(column, pa.Array) else (
        column.chunk(0) if column.num_chunks == 1 else column.combine_chunks())
    if array.type != pa.int64():
        array = array.view(pa.int64())
    return array.to_numpy()


def validate_records(table: pa.Table, config: TopicConfig, now_ms: int | None = None) -> None:
    """Every check a topic makes of the records it is given, in one place: sizes, keys, then timestamps."""
    check_sizes(table, config.max_message_bytes)
    if config.compacts:
        check_keys(table)
    if config.timestamp_type == TimestampType.CREATE_TIME:  # LogAppendTime replaces the client's timestamps
        check_timestamps(table, config, int(time.time() * 1000) if now_ms is None else now_ms)


def check_keys(table: pa.Table) -> None:
    """A compacted topic keeps the latest record per key: a record without one (a null key; an empty key is a
    key) is refused, as Kafka's LogValidator refuses it, with one error per such record (KIP-467)."""
    keys = table.column("key")
    if keys.null_count == 0:
        return
    missing = pc.indices_nonzero(pc.is_null(keys)).to_pylist()
    why = "Compacted topic cannot accept message without key"
    shown = ", ".join(map(str, missing[:SHOWN_RECORD_ERRORS])) + (", ..." if len(missing) > SHOWN_RECORD_ERRORS else "")
    raise RecordsRefused(f"{len(missing)} of {table.num_rows} records have no key (records {shown}): a compacted "
                         "topic (cleanup.policy=compact) cannot accept a record without a key; nothing was written",
                         [(int(i), why) for i in missing])


def check_timestamps(table: pa.Table, config: TopicConfig, now_ms: int) -> None:
    """The storable range (0 to MAX_TIMESTAMP_MS), then Kafka's message.timestamp.before.max.ms and
    message.timestamp.after.max.ms (or the deprecated difference.max.ms in their place: `TopicConfig.before_bound`).
    The one place timestamps are checked."""
    stamps = int64_values(table.column("timestamp"))  # numpy: a flush of a few records checks in microseconds
    bounds = [(MAX_TIMESTAMP_MS, "the largest storable timestamp (9999-12-31T23:59:59.999Z)")]
    after_ms, after_key = config.after_bound
    if after_ms < MAX_TIMESTAMP_MS:
        bounds.append((now_ms + after_ms, f"{after_key} ({after_ms} ms after the broker's clock)"))
    smallest, largest = int(stamps.min()), int(stamps.max())
    for limit, name in bounds:
        if largest > limit:
            at = int(np.argmax(stamps == largest))
            raise InvalidTimestamp(f"record {at} has timestamp {largest} ms, above {name}: {limit} ms")
    if smallest < 0:
        at = int(np.argmax(stamps == smallest))
        raise InvalidTimestamp(f"record {at} has timestamp {smallest} ms: timestamps are milliseconds since the "
                               "epoch, >= 0")
    before_ms, before_key = config.before_bound
    if before_ms < now_ms:
        limit = now_ms - before_ms
        if smallest < limit:
            at = int(np.argmax(stamps == smallest))
            raise InvalidTimestamp(f"record {at} has timestamp {smallest} ms, below {before_key} ({before_ms} ms "
                                   f"before the broker's clock): {limit} ms")


def check_sizes(table: pa.Table, max_message_bytes: int) -> None:
    # Every record fits when all their keys, values and headers together do (the columns' whole buffers are
    # an upper bound, and cheap to sum): the common small request skips the per-record sizes.
    if sum(table.column(name).get_total_buffer_size() for name in ("key", "value", "headers")) <= max_message_bytes:
        return
    sizes = record_sizes(table)
    largest = int(pc.max(sizes).as_py() or 0)
    if largest > max_message_bytes:
        at = int(pc.index(sizes, largest).as_py())
        raise RecordTooLarge(
            f"record {at} is {largest} bytes, over the topic's max.message.bytes of {max_message_bytes} bytes"
        )


def record_sizes(table: pa.Table) -> pa.Array:
    """Bytes of key + value + header keys and values, per record."""
    sizes = pc.add(
        pc.fill_null(pc.binary_length(table.column("key")), 0),
        pc.fill_null(pc.binary_length(table.column("value")), 0),
    )
    headers = table.column("headers")
    if headers.null_count < len(headers):
        flat = pc.list_flatten(headers)
        if len(flat):
            parents = pc.list_parent_indices(headers).to_numpy()
            each = pc.add(pc.fill_null(pc.binary_length(pc.struct_field(flat, "key").cast(pa.binary())), 0),
                          pc.fill_null(pc.binary_length(pc.struct_field(flat, "value")), 0)).to_numpy()
            extra = np.bincount(parents, weights=each, minlength=table.num_rows).astype(np.int64)
            sizes = pc.add(sizes, pa.array(extra))
    return sizes.combine_chunks() if isinstance(sizes, pa.ChunkedArray) else sizes
