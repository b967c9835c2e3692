"""typed/produce.py: a typed topic's call refused whole, or split between the topic and its dead-letter topic,
with a broker that records what it is asked to write (the registry is a real one on a local root)."""

from __future__ import annotations

import io
import json
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from lakelog.platform.typed import produce as typed_produce
from lakelog.platform.errors import RecordsRefused, UnknownTopicOrPartition
from lakelog.platform.records import ProduceResult, ProducerBatch, RecordColumns
from lakelog.platform.schema_registry import SchemaRegistry
from lakelog.platform.schema_registry.validation import RecordValidator
from lakelog.platform.schema_registry.wire_format import framed
from lakelog.platform.storage import Storage
from lakelog.platform.catalog.topic_config import parse_topic_config

SCHEMA = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}


@dataclass
class Meta:
    config: Any


@dataclass
class FakeBroker:
    configs: dict[str, Any]
    calls: list[tuple[str, Any, Any]] = field(default_factory=list)

    def topic(self, name: str) -> Meta:
        if name not in self.configs:
            raise UnknownTopicOrPartition(f"unknown topic {name!r}")
        return Meta(self.configs[name])

    def produce_async(self, topic: str, records: Any, acks: Any, timeout_ms: Any, producer: Any = None) -> Future:
        self.calls.append((topic, records, producer))
        n = len(records) if isinstance(records, RecordColumns) else records.num_rows
        start = 100 * len(self.calls)
        done: Future = Future()
        done.set_result(ProduceResult(np.zeros(n, dtype=np.int64), np.arange(start, start + n, dtype=np.int64),
                                      np.full(n, 5, dtype=np.int64)))
        return done


@pytest.fixture(scope="module")
def validator(tmp_path_factory: pytest.TempPathFactory) -> RecordValidator:
    registry = SchemaRegistry(Storage.open(str(tmp_path_factory.mktemp("root"))))
    registry.register("t-value", json.dumps(SCHEMA))
    registry.register("t-key", '"string"')
    return RecordValidator(registry)


def good(a: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), {"a": a})
    return framed(1, out.getvalue())


def broker(**config: Any) -> FakeBroker:
    return FakeBroker({"t": parse_topic_config({"confluent.value.schema.validation": True, **config}),
                       "dlq": parse_topic_config({})})


def columns(values: list[bytes | None]) -> RecordColumns:
    return RecordColumns([b"k"] * len(values), values, [[{"key": "h", "value": b"1"}]] * len(values), None,
                         [0] * len(values))


def test_good_calls_pass_unchanged(validator: RecordValidator) -> None:
    fake, records = broker(), columns([good(1), good(2)])
    screened = typed_produce.screen(fake, validator, "t", records)
    assert screened.records is records and screened.dead is None
    result = typed_produce.submit(fake, screened, 1, None, None).result()
    assert result.offsets.tolist() == [100, 101] and [c[0] for c in fake.calls] == ["t"]


def test_refused_whole_without_a_dead_letter_topic(validator: RecordValidator, caplog) -> None:
    with pytest.raises(RecordsRefused) as refused:
        typed_produce.screen(broker(), validator, "t", columns([good(1), b"bad", good(2), None, b"\0\0\0\0\x01"]))
    assert [i for i, _ in refused.value.record_errors] == [1, 4]
    assert refused.value.code == "INVALID_RECORD" and "nothing was written" in refused.value.message
    assert "produce refused" in caplog.text


@pytest.mark.parametrize("dlq,producer,why", [
    ("t", None, "is the topic itself"), ("missing", None, "does not exist"),
    ("dlq", ProducerBatch(1, 0, 0), "idempotent producer"),
])
def test_refused_when_dead_letters_cannot_apply(validator: RecordValidator, dlq: str, producer: Any, why: str) -> None:
    with pytest.raises(RecordsRefused, match=why):
        typed_produce.screen(broker(**{"errors.deadletterqueue.topic.name": dlq}), validator, "t",
                             columns([b"bad"]), producer)


def test_dead_letters_split_the_call(validator: RecordValidator) -> None:
    fake = broker(**{"errors.deadletterqueue.topic.name": "dlq"})
    screened = typed_produce.screen(fake, validator, "t", columns([good(1), b"bad", good(2), b"\0\0\0\0\x07x"]))
    result = typed_produce.submit(fake, screened, 1, None, None).result()
    (dlq_topic, dead, _), (topic, kept, _) = fake.calls
    assert (dlq_topic, topic) == ("dlq", "t")
    assert kept.values == [good(1), good(2)] and kept.partitions == [0, 0]
    assert dead.values == [b"bad", b"\0\0\0\0\x07x"] and dead.partitions is None
    headers = {h["key"]: h["value"] for h in dead.headers[0]}
    assert headers["h"] == b"1" and headers["__lakelog.dlq.topic"] == b"t"
    assert headers["__lakelog.dlq.partition"] == b"0" and b"too short" in headers["__lakelog.dlq.reason"]
    # answers: the topic's offsets for the good records, -1 for the dead-lettered, and where those went
    assert result.offsets.tolist() == [200, -1, 201, -1] and result.partitions.tolist() == [0, -1, 0, -1]
    assert [(d.index, d.topic, d.offset) for d in result.dead_letters] == [(1, "dlq", 100), (3, "dlq", 101)]
    assert "schema id 7 is not registered" in result.dead_letters[1].reason


def test_all_dead_lettered_writes_nothing_to_the_topic(validator: RecordValidator) -> None:
    fake = broker(**{"errors.deadletterqueue.topic.name": "dlq"})
    table = pa.table({"value": pa.array([b"x", b"y"], pa.binary())})
    result = typed_produce.submit(fake, typed_produce.screen(fake, validator, "t", table), 1, None, None).result()
    assert [c[0] for c in fake.calls] == ["dlq"] and result.offsets.tolist() == [-1, -1]
    assert len(result.dead_letters) == 2


def test_embedded_json_is_converted_first(validator: RecordValidator) -> None:
    fake = broker()
    screened = typed_produce.screen(fake, validator, "t", columns([b'{"a": 5}']), json_values=True)
    assert screened.records.values == [good(5)]
    with pytest.raises(RecordsRefused, match="does not convert"):
        typed_produce.screen(fake, validator, "t", columns([b'{"a": "five"}']), json_values=True)


def test_embedded_json_keys(validator: RecordValidator) -> None:
    fake = broker(**{"confluent.key.schema.validation": True, "confluent.value.schema.validation": False})
    screened = typed_produce.screen(fake, validator, "t", RecordColumns([b'"abc"', None], [b"any", b"thing"]),
                                    json_keys=True, json_values=True)  # values: not typed, left as they are
    assert screened.records.keys == [framed(2, b"\x06abc"), None] and screened.records.values == [b"any", b"thing"]
    with pytest.raises(RecordsRefused, match="key: does not convert"):
        typed_produce.screen(fake, validator, "t", RecordColumns([b"17"], [b"v"]), json_keys=True)
