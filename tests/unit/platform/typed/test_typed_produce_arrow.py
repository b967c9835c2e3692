"""typed/produce.py with Arrow calls: their keys and values are checked from the Arrow columns (in bulk when
they share one schema id), with the same answers as the same records as Python columns."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakelog.platform.errors import RecordsRefused
from lakelog.platform.records import RecordColumns
from lakelog.platform.schema_registry.validation import RecordValidator
from lakelog.platform.typed import produce as typed_produce
from tests.unit.platform.typed.test_typed_produce import broker, good, validator  # noqa: F401 (a fixture)

CALLS = [
    [good(1), good(2), good(3)],
    [good(1), good(2)[:-1], good(3) + b"x"],  # one schema id: read in bulk, the bad ones one by one
    [good(1), b"bad", None, b"\0\0\0\0\x07x", good(2)],
    [good(i) for i in range(2_000)] + [b"\0\0\0\0\x01"],
]


def outcome(fake, validator: RecordValidator, records) -> object:
    try:
        screened = typed_produce.screen(fake, validator, "t", records)
    except RecordsRefused as refused:
        return "refused", refused.record_errors
    dead = None if screened.dead is None else (screened.dead.keys, screened.dead.values)
    return screened.good, screened.reasons, dead


@pytest.mark.parametrize("values", CALLS)
@pytest.mark.parametrize("dlq", ["", "dlq"])
def test_arrow_calls_as_columns(validator: RecordValidator, values: list, dlq: str) -> None:
    keys = [f"k{i}".encode() for i in range(len(values))]
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})
    fake = broker(**{"errors.deadletterqueue.topic.name": dlq})
    expected = outcome(fake, validator, RecordColumns(keys, values))
    assert outcome(fake, validator, table) == expected
    assert outcome(fake, validator, pa.concat_tables([table.slice(0, 1), table.slice(1)])) == expected  # chunks
