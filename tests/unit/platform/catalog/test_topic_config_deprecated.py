"""topic_config: the keys Kafka 3.9 deprecates but takes. message.timestamp.difference.max.ms stands in for
before/after.max.ms while they are at their defaults (Kafka's LogConfig); message.format.version takes the
versions Kafka's MetadataVersion parses; the lines logged name the keys a create or an alter set."""

from __future__ import annotations

import pytest

from lakelog.platform.errors import InvalidConfig
from lakelog.platform.catalog.topic_config import MAX_LONG, deprecated_settings, parse_topic_config


def test_the_difference_bounds_both_sides_unless_they_are_set() -> None:
    config = parse_topic_config({"message.timestamp.difference.max.ms": "1000"})
    assert config.before_bound == config.after_bound == (1000, "message.timestamp.difference.max.ms")
    config = parse_topic_config({"message.timestamp.difference.max.ms": "1000",
                                 "message.timestamp.before.max.ms": "5000"})
    assert config.before_bound == (5000, "message.timestamp.before.max.ms")
    assert config.after_bound == (1000, "message.timestamp.difference.max.ms")
    assert parse_topic_config({}).before_bound == (MAX_LONG, "message.timestamp.before.max.ms")


@pytest.mark.parametrize("version", ["0.8.0", "0.10.0", "0.10.0-IV1", "0.10.0.1", "0.11.0", "1.0", "1.1", "2.8",
                                     "2.8-IV1", "2.8.1", "3.0-IV1", "3.9"])
def test_kafka_versions_are_message_format_versions(version: str) -> None:
    assert parse_topic_config({"message.format.version": version}).message_format_version == version


@pytest.mark.parametrize("version", ["banana", "", "4.0", "0.12.0", "3", "2.81", "v2"])
def test_anything_else_is_invalid_config(version: str) -> None:
    with pytest.raises(InvalidConfig, match="message.format.version"):
        parse_topic_config({"message.format.version": version})


def test_the_downconversion_switch_is_a_boolean() -> None:
    assert parse_topic_config({"message.downconversion.enable": "FALSE"}).message_downconversion_enable is False
    with pytest.raises(InvalidConfig, match="message.downconversion.enable"):
        parse_topic_config({"message.downconversion.enable": "0"})


def test_the_lines_logged_name_what_was_set() -> None:
    assert deprecated_settings(parse_topic_config({"retention.ms": "1000"})) == []
    assert deprecated_settings(parse_topic_config({"message.format.version": "3.0-IV1"})) == []  # the default
    created = parse_topic_config({"message.format.version": "0.10.0", "message.downconversion.enable": "false"})
    lines = deprecated_settings(created)
    assert [line.split(":")[0] for line in lines] == ["message.format.version=0.10.0",
                                                      "message.downconversion.enable=false"]
    assert "ignored" in lines[0]
    altered = created.altered({"message.timestamp.difference.max.ms": "60000"})
    assert [line.split(":")[0] for line in deprecated_settings(altered, created)] == [
        "message.timestamp.difference.max.ms=60000"]  # what the alter changed only
