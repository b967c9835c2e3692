"""groups/offsets_topic.py: `__consumer_offsets` records in Kafka's own format, generated from the offsets table.

The partition of a group and the bytes of keys and values are Kafka's (the Java hashes below were checked
against `String.hashCode` on a JVM); offsets come from commit times, so they stay put as the table grows.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest

from lakelog.platform.groups import offsets_topic as ot


@pytest.mark.parametrize(("group", "java_hash", "partition"), [
    ("", 0, 0),
    ("a", 97, 47),
    ("hello", 99162322, 22),
    ("polygenelubricants", -2**31, 0),  # Integer.MIN_VALUE: Kafka's Utils.abs makes it 0
    ("\U0001F600", 1772899, 49),  # outside the BMP: two UTF-16 code units, as Java hashes them
    ("my-group", -1906497762, 12),
    ("grüße", 98768023, 23),
])
def test_a_group_lands_where_kafka_puts_it(group: str, java_hash: int, partition: int) -> None:
    assert ot.java_hash(group) == java_hash
    assert ot.partition_for(group) == partition


def test_offset_commit_key_and_value_are_kafkas_bytes() -> None:
    key = ot.offset_key("g", "orders", 3)
    assert key == struct.pack(">hh", 1, 1) + b"g" + struct.pack(">h", 6) + b"orders" + struct.pack(">i", 3)
    value = ot.offset_value(42, "meta", 1_700_000_000_000)
    assert value == struct.pack(">hqi", 3, 42, -1) + struct.pack(">h", 4) + b"meta" + struct.pack(">q", 1_700_000_000_000)
    assert ot.decode_key(key) == ot.OffsetKey("g", "orders", 3)
    assert ot.decode_offset_value(value) == ot.OffsetValue(42, -1, "meta", 1_700_000_000_000)


def test_version_1_values_decode_too() -> None:
    v1 = struct.pack(">hq", 1, 7) + struct.pack(">h", 0) + struct.pack(">qq", 123, -1)  # with expire timestamp
    assert ot.decode_offset_value(v1) == ot.OffsetValue(7, -1, "", 123)


def test_group_metadata_record() -> None:
    assert ot.decode_key(ot.group_key("g")) == ot.GroupKey("g")
    value = ot.group_value(5, 1000)
    # version, protocol type, generation, protocol (null), leader (null), state timestamp, no members
    assert value == (struct.pack(">hh", 3, 8) + b"consumer" + struct.pack(">ihhqi", 5, -1, -1, 1000, 0))
    assert ot.decode_group_generation(value) == ("consumer", 5)


def rows(*entries: tuple[str, str, int, int, int, int]) -> pa.Table:
    """(group, topic, partition, offset, generation, committed ms) rows, as the offsets table holds them."""
    columns = list(zip(*entries))
    return pa.table({"group": columns[0], "topic": columns[1], "partition": columns[2], "offset": columns[3],
                     "metadata": [None] * len(entries), "generation": columns[4], "committed": columns[5]},
                    schema=ot.ROW_SCHEMA)


def test_offsets_come_from_commit_times_and_ranks() -> None:
    generated = ot.records(rows(("g", "t", 1, 10, -1, 5000), ("g", "t", 0, 20, -1, 5000), ("g", "t", 0, 30, -1, 5001)))
    assert generated.column("out_partition").to_pylist() == [ot.partition_for("g")] * 3
    # same millisecond: ranked by (group, topic, partition); each row takes two slots, the commit the odd one
    assert generated.column("out_offset").to_pylist() == [5000 * ot.SLOTS_PER_MS + 1, 5000 * ot.SLOTS_PER_MS + 3,
                                                          5001 * ot.SLOTS_PER_MS + 1]
    assert generated.column("offset").to_pylist() == [20, 10, 30]


def test_offsets_stay_put_as_the_table_grows() -> None:
    before = rows(("g", "t", 0, 1, 3, 100), ("h", "t", 0, 2, -1, 200))
    after = pa.concat_tables([before, rows(("g", "t", 0, 5, 3, 300), ("g", "t", 1, 6, 4, 300))])
    first = ot.records(before).select(["out_partition", "out_offset", "offset"]).to_pylist()
    again = ot.records(after).select(["out_partition", "out_offset", "offset"]).to_pylist()
    assert all(record in again for record in first)


def test_a_group_metadata_record_starts_each_generation() -> None:
    generated = ot.records(rows(("g", "t", 0, 1, 3, 100), ("g", "t", 1, 1, 3, 100), ("g", "t", 0, 2, 3, 200),
                                ("g", "t", 0, 3, 4, 300), ("g", "t", 0, 4, -1, 400)))
    kinds = list(zip(generated.column("kind").to_pylist(), generated.column("out_offset").to_pylist(),
                     generated.column("generation").to_pylist()))
    group_records = [(offset, generation) for kind, offset, generation in kinds if kind == ot.GROUP_RECORD]
    assert group_records == [(100 * ot.SLOTS_PER_MS, 3), (300 * ot.SLOTS_PER_MS, 4)]  # just before its commit
    offsets = generated.column("out_offset").to_pylist()
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def test_encoded_records_decode_as_a_tool_decodes_them() -> None:
    generated = ot.records(rows(("g", "t", 0, -1, 2, 100)))
    keys, values = ot.encode(generated)
    assert [ot.decode_key(k) for k in keys] == [ot.GroupKey("g"), ot.OffsetKey("g", "t", 0)]
    assert ot.decode_group_generation(values[0]) == ("consumer", 2)
    assert ot.decode_offset_value(values[1]) == ot.OffsetValue(-1, -1, "", 100)  # -1 kept as committed


def test_no_rows_no_records() -> None:
    assert ot.records(ot.ROW_SCHEMA.empty_table()).num_rows == 0


def test_rows_as_a_parquet_reader_finds_them() -> None:
    """delta-rs writes view types and a timestamp; in_ms makes them ROW_SCHEMA."""
    stored = pa.table({"group": pa.array(["g"], pa.string_view()), "topic": pa.array(["t"], pa.string_view()),
                       "partition": pa.array([0], pa.int32()), "offset": pa.array([1], pa.int64()),
                       "metadata": pa.array([None], pa.string_view()), "generation": pa.array([2], pa.int32()),
                       "committed": pa.array([1_500], pa.timestamp("us", tz="UTC"))})
    converted = ot.in_ms(stored)
    assert converted.schema == ot.ROW_SCHEMA and converted.column("committed").to_pylist() == [1]
