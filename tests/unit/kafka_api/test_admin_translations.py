"""The pure translations of the Kafka admin APIs added for issue 24: AlterConfigs' replace-all config,
DescribeProducers' producer ids, and `__consumer_offsets` batches (offsets far apart)."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest
from aiokafka.record.memory_records import MemoryRecords

from lakelog.kafka_api.handlers.admin import BOOLEAN, CONFIG_TYPES, STRING, config_entries
from lakelog.kafka_api.handlers.alter_configs import replaced_config
from lakelog.kafka_api.handlers.offsets_topic import MAX_DELTA, encode_batches
from lakelog.kafka_api.producer_ids import kafka_producer_id, lakelog_producer_id
from lakelog.platform.errors import InvalidConfig, InvalidRequest
from lakelog.platform.groups.offsets_topic_log import BATCH_SCHEMA
from lakelog.platform.records import IDEMPOTENCY_BASE
from lakelog.platform.catalog.topic_config import parse_topic_config


def entry(name: str, value: str | None) -> SimpleNamespace:
    return SimpleNamespace(name=name, value=value)


def test_alter_configs_replaces_the_whole_config() -> None:
    config = replaced_config([entry("retention.ms", "1000"), entry("cleanup.policy", None)])
    defaults = parse_topic_config(None).to_kafka()
    assert config["retention.ms"] == "1000"
    assert config["cleanup.policy"] == "delete"  # null: back to the default
    assert config["segment.ms"] == defaults["segment.ms"]  # not given: back to the default
    assert "replication.factor" not in config  # set at creation: keeps its value


def test_alter_configs_refuses_unknown_and_repeated_keys() -> None:
    with pytest.raises(InvalidConfig, match="no.such.key"):
        replaced_config([entry("no.such.key", "1")])
    with pytest.raises(InvalidRequest, match="more than once"):
        replaced_config([entry("retention.ms", "1"), entry("retention.ms", "2")])


def test_producer_ids_as_kafka_clients_know_them() -> None:
    assert kafka_producer_id(lakelog_producer_id(12345, 3), 3) == 12345
    assert kafka_producer_id(lakelog_producer_id(12345, 3), 4) is None  # another partition's range
    assert kafka_producer_id(77, 0) == 77  # an HTTP producer: lakelog's own id
    assert kafka_producer_id(IDEMPOTENCY_BASE + 5, 0) is None  # an Idempotency-Key retry, not a producer


def test_records_far_apart_go_in_batches_of_their_own() -> None:
    offsets = [10, 11, 11 + MAX_DELTA + 1, 11 + MAX_DELTA + 2]
    rows = pa.table({"offset": offsets, "timestamp": [1, 2, 3, 4], "key": [b"k"] * 4, "value": [b"v"] * 4,
                     "headers": [None] * 4}, schema=BATCH_SCHEMA)
    data = MemoryRecords(encode_batches(rows))
    batches = []
    while (batch := data.next_batch()) is not None:
        batches.append([record.offset for record in batch])
    assert batches == [offsets[:2], offsets[2:]]
    assert encode_batches(BATCH_SCHEMA.empty_table()) == b""


def test_typed_topic_configs_are_kafka_booleans() -> None:
    entries = {e.name: e for e in config_entries(parse_topic_config({"confluent.value.schema.validation": "true"}))}
    assert (entries["confluent.value.schema.validation"].value, entries["confluent.value.schema.validation"].default) \
        == ("true", "false")
    assert entries["confluent.key.schema.validation"].is_default
    assert CONFIG_TYPES["confluent.value.schema.validation"] == BOOLEAN
    assert CONFIG_TYPES["errors.deadletterqueue.topic.name"] == STRING
