"""record_checks.check_keys: a compacted topic refuses records without a key, one error per such record, as
Kafka's LogValidator does (INVALID_RECORD); an empty key is a key, and other topics take keyless records."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakelog.platform.errors import RecordsRefused
from lakelog.platform.records import Record, records_to_table, validate_records
from lakelog.platform.catalog.topic_config import parse_topic_config


def table(*keys: bytes | None) -> pa.Table:
    return records_to_table([Record(b"v", key=k) for k in keys])[0]


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact"])
def test_a_compacted_topic_refuses_records_without_a_key(policy: str) -> None:
    with pytest.raises(RecordsRefused) as refused:
        validate_records(table(b"k", None, b"", None), parse_topic_config({"cleanup.policy": policy}))
    assert refused.value.code == "INVALID_RECORD"
    assert refused.value.record_errors == [(1, "Compacted topic cannot accept message without key"),
                                           (3, "Compacted topic cannot accept message without key")]
    assert refused.value.message.startswith("2 of 4 records have no key (records 1, 3)")


def test_keys_of_several_chunks_are_found() -> None:
    whole = pa.concat_tables([table(b"a"), table(None, b"b", None, None, None)])  # a flush's calls, chunked
    with pytest.raises(RecordsRefused) as refused:
        validate_records(whole, parse_topic_config({"cleanup.policy": "compact"}))
    assert [i for i, _ in refused.value.record_errors] == [1, 3, 4, 5]
    assert "(records 1, 3, 4, ...)" in refused.value.message


def test_keys_are_not_required_elsewhere() -> None:
    validate_records(table(None, b"k"), parse_topic_config({"cleanup.policy": "delete"}))
    validate_records(table(b"", b"k"), parse_topic_config({"cleanup.policy": "compact"}))  # empty: a key
