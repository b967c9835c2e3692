"""records.py: the one validation of timestamps and sizes, and content digests (pure, no storage)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakelog.platform.errors import InvalidRecord, InvalidTimestamp
from lakelog.platform.records import (
    IDEMPOTENCY_BASE,
    MAX_TIMESTAMP_MS,
    Record,
    arrow_to_table,
    content_digest,
    idempotency_key_batch,
    records_to_table,
    validate_records,
)
from lakelog.platform.catalog.topic_config import parse_topic_config

NOW = 1_800_000_000_000
HOUR = 3_600_000


def table(*stamps: int) -> pa.Table:
    return records_to_table([Record(b"v", timestamp_ms=t) for t in stamps])[0]


@pytest.mark.parametrize("stamps,message", [
    ((0, MAX_TIMESTAMP_MS + 1), "record 1 has timestamp 253402300800000 ms, above the largest storable"),
    ((5, 2**63 - 1), "record 1 has timestamp 9223372036854775807"),
    ((7, -1), "record 1 has timestamp -1 ms"),
])
def test_timestamps_outside_the_storable_range(stamps: tuple[int, ...], message: str) -> None:
    with pytest.raises(InvalidTimestamp, match=message):
        validate_records(table(*stamps), parse_topic_config({}), NOW)


def test_the_storable_range_is_inclusive() -> None:
    validate_records(table(0, MAX_TIMESTAMP_MS), parse_topic_config({}), NOW)


def test_kafka_before_and_after_limits() -> None:
    config = parse_topic_config({"message.timestamp.before.max.ms": HOUR, "message.timestamp.after.max.ms": HOUR})
    validate_records(table(NOW - HOUR, NOW + HOUR), config, NOW)
    with pytest.raises(InvalidTimestamp, match=f"record 0 .* below message.timestamp.before.max.ms.*{NOW - HOUR}"):
        validate_records(table(NOW - HOUR - 1), config, NOW)
    with pytest.raises(InvalidTimestamp, match=f"above message.timestamp.after.max.ms.*{NOW + HOUR}"):
        validate_records(table(NOW, NOW + HOUR + 1), config, NOW)


def test_log_append_time_topics_do_not_check_client_timestamps() -> None:
    validate_records(table(-5, MAX_TIMESTAMP_MS * 2), parse_topic_config({"message.timestamp.type": "LogAppendTime"}),
                     NOW)


def test_invalid_timestamp_is_an_invalid_record() -> None:
    assert issubclass(InvalidTimestamp, InvalidRecord) and InvalidTimestamp.code == "INVALID_TIMESTAMP"


def test_arrow_partition_column_must_be_integers() -> None:
    with pytest.raises(InvalidRecord, match="partition column must be integers, got string"):
        arrow_to_table(pa.table({"value": [b"a"], "partition": ["1"]}))
    with pytest.raises(InvalidRecord, match="got double"):
        arrow_to_table(pa.table({"value": [b"a"], "partition": [1.0]}))
    assert arrow_to_table(pa.table({"value": [b"a"], "partition": pa.array([1], pa.int8())}))[1] == [1]


records = st.lists(st.builds(Record, st.one_of(st.none(), st.binary(max_size=8)),
                             st.one_of(st.none(), st.binary(max_size=8)),
                             st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=3), st.binary(max_size=3)),
                                                           max_size=2))), min_size=1, max_size=8)


@given(records, records)
def test_content_digest_tells_content_apart(a: list[Record], b: list[Record]) -> None:
    same = [(r.key, r.value, list(r.headers or []) if r.headers is not None else None) for r in a] == \
           [(r.key, r.value, list(r.headers or []) if r.headers is not None else None) for r in b]
    assert (content_digest(records_to_table(a)[0]) == content_digest(records_to_table(b)[0])) == same


@given(records, st.integers(1, 7))
def test_content_digest_ignores_the_memory_layout(batch: list[Record], cut: int) -> None:
    """The same records, sliced out of a larger table or read back from parquet, digest the same."""
    whole = records_to_table(batch)[0]
    padded = pa.concat_tables([records_to_table([Record(b"pad", b"k")] * cut)[0], whole]).combine_chunks().slice(cut)
    sink = pa.BufferOutputStream()
    pq.write_table(whole, sink)
    reread = pq.read_table(pa.BufferReader(sink.getvalue())).cast(whole.schema)
    assert content_digest(padded) == content_digest(whole) == content_digest(reread)


def test_null_and_empty_differ() -> None:
    assert content_digest(records_to_table([Record(b"")])[0]) != content_digest(records_to_table([Record(None)])[0])


def test_idempotency_keys_map_to_their_own_producer_ids() -> None:
    a, b = idempotency_key_batch("order-1"), idempotency_key_batch("order-2")
    assert a == idempotency_key_batch("order-1") and a.producer_id != b.producer_id
    assert a.keyed and a.producer_id >= IDEMPOTENCY_BASE and (a.producer_epoch, a.base_sequence) == (0, 0)
