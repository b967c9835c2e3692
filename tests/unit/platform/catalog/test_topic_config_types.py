"""topic_config.py: Kafka's types and ranges, no silent coercion."""

from __future__ import annotations

import pytest

from lakelog.platform.errors import InvalidConfig
from lakelog.platform.catalog.topic_config import parse_topic_config


@pytest.mark.parametrize("key,value", [
    ("retention.ms", True), ("retention.ms", 1.0), ("retention.ms", 2**63), ("retention.ms", "soon"),
    ("segment.bytes", 2**31), ("max.message.bytes", 2**31), ("replication.factor", 32768),
    ("message.timestamp.after.max.ms", -1), ("min.insync.replicas", False),
])
def test_refused(key: str, value: object) -> None:
    with pytest.raises(InvalidConfig, match=key):
        parse_topic_config({key: value})


@pytest.mark.parametrize("key,value,expected", [
    ("retention.ms", "3600000", 3600000), ("retention.ms", 2**63 - 1, 2**63 - 1), ("retention.ms", -1, -1),
    ("segment.bytes", 2**31 - 1, 2**31 - 1), ("message.timestamp.before.max.ms", "0", 0),
])
def test_accepted(key: str, value: object, expected: int) -> None:
    assert parse_topic_config({key: value}).to_kafka()[key] == expected


@pytest.mark.parametrize("value", ["1", "yes", 1, 0, None, "on"])
def test_booleans_are_true_or_false(value: object) -> None:
    with pytest.raises(InvalidConfig, match="confluent.value.schema.validation"):
        parse_topic_config({"confluent.value.schema.validation": value})


@pytest.mark.parametrize("value,expected", [("true", True), ("FALSE", False), (True, True), (" True ", True)])
def test_booleans_accepted(value: object, expected: bool) -> None:
    config = parse_topic_config({"confluent.key.schema.validation": value})
    assert config.to_kafka()["confluent.key.schema.validation"] is expected
    assert config.validates_schemas is expected


@pytest.mark.parametrize("value", ["bad name", "x" * 250, 3])
def test_dead_letter_topic_is_a_topic_name(value: object) -> None:
    with pytest.raises(InvalidConfig, match="errors.deadletterqueue.topic.name"):
        parse_topic_config({"errors.deadletterqueue.topic.name": value})
