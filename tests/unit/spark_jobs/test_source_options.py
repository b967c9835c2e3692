"""Option parsing of the lakelog source and sink, checked against Spark's Kafka connector rules (no Spark)."""

from __future__ import annotations

import json

import pytest

from lakelog.platform.errors import InvalidConfig
from lakelog.spark_jobs.options import (
    SINK_REFUSED_KAFKA_OPTIONS,
    SourceOptions,
    check_names_every_partition,
    parse_duration_ms,
    refuse_kafka_options,
)

ROOT = {"lakelog.root": "/nowhere", "subscribe": "t"}


def parse(streaming: bool = False, **options: str) -> SourceOptions:
    return SourceOptions.parse({**ROOT, **options}, streaming=streaming)


def test_starting_timestamp_takes_precedence_over_the_other_starting_options():
    """Guide: startingTimestamp "takes precedence over startingOffsetsByTimestamp and startingOffsets";
    startingOffsetsByTimestamp "takes precedence over startingOffsets"."""
    both = parse(startingTimestamp="1000", startingOffsetsByTimestamp=json.dumps({"t": {"0": 5}}),
                 startingOffsets="earliest")
    assert (both.starting.kind, both.starting.timestamp_ms, both.starting.option) == \
        ("timestamp", 1000, "startingTimestamp")
    by_partition = parse(startingOffsetsByTimestamp=json.dumps({"t": {"0": 5}}), startingOffsets="earliest")
    assert (by_partition.starting.kind, by_partition.starting.offsets) == ("timestamps", {"t": {"0": 5}})


def test_ending_timestamp_takes_precedence_and_never_fails_on_no_match():
    """Guide: endingTimestamp "takes precedence over endingOffsetsByTimestamp and endingOffsets"; for the
    ending timestamps "If Kafka doesn't return the matched offset, the offset will be set to latest"."""
    spec = parse(endingTimestamp="2000", endingOffsetsByTimestamp=json.dumps({"t": {"0": 5}}),
                 endingOffsets="latest").ending
    assert (spec.kind, spec.timestamp_ms, spec.fail_if_no_match) == ("timestamp", 2000, False)
    spec = parse(endingOffsetsByTimestamp=json.dumps({"t": {"0": 5}}), endingOffsets="latest").ending
    assert (spec.kind, spec.fail_if_no_match) == ("timestamps", False)


@pytest.mark.parametrize("option", ["endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"])
def test_ending_options_are_refused_in_streaming(option):
    """Kafka: "ending offset not valid in streaming queries" / "ending timestamp not valid in streaming queries"
    (Kafka ignores endingTimestamp in streaming; lakelog refuses it rather than ignore it)."""
    value = json.dumps({"t": {"0": 1}}) if option != "endingTimestamp" else "1"
    with pytest.raises(InvalidConfig, match=option):
        parse(streaming=True, **{option: value})


@pytest.mark.parametrize("options, message", [
    ({"startingOffsets": "latest"}, "'startingOffsets' cannot be latest for batch"),
    ({"startingOffsets": json.dumps({"t": {"0": -1}})}, "'startingOffsets' for t-0 cannot be -1"),
    ({"endingOffsets": "earliest"}, "'endingOffsets' cannot be earliest for batch"),
    ({"endingOffsets": json.dumps({"t": {"0": 5, "1": -2}})}, "'endingOffsets' for t-1 cannot be -2"),
])
def test_batch_bounds_kafka_refuses(options, message):
    """Guide, startingOffsets: "In the json, -2 as an offset can be used to refer to earliest, -1 to latest.
    Note: For batch queries, latest (either implicitly or by using -1 in json) is not allowed."
    endingOffsets: "-1 as an offset can be used to refer to latest, and -2 (earliest) as an offset is not allowed"."""
    with pytest.raises(InvalidConfig, match=message):
        parse(**options)
    parse(streaming=True, **{k: v for k, v in options.items() if k.startswith("starting")})  # fine in streaming


def test_json_must_name_exactly_the_subscribed_partitions():
    """Kafka asserts "If startingOffsets contains specific offsets, you must specify all TopicPartitions"
    (and the same for starting/endingOffsetsByTimestamp): a partition left out or not subscribed is refused."""
    partitions = [("t", 0), ("t", 1)]
    check_names_every_partition({"t": {"0": 1, "1": 2}}, partitions, "startingOffsets")
    with pytest.raises(InvalidConfig, match=r"'startingOffsets'.*missing t-1"):
        check_names_every_partition({"t": {"0": 1}}, partitions, "startingOffsets")
    with pytest.raises(InvalidConfig, match=r"'startingOffsetsByTimestamp'.*not subscribed u-0"):
        check_names_every_partition({"t": {"0": 1, "1": 2}, "u": {"0": 3}}, partitions, "startingOffsetsByTimestamp")


def test_trigger_limits():
    """Guide: minOffsetsPerTrigger "Minimum number of offsets to be processed per trigger interval";
    maxTriggerDelay "Maximum amount of time for which trigger can be delayed between two triggers provided
    some data is available from the source. This option is only applicable if minOffsetsPerTrigger is set",
    default 15m. Kafka refuses minOffsetsPerTrigger above maxOffsetsPerTrigger."""
    options = parse(streaming=True, minOffsetsPerTrigger="10", maxOffsetsPerTrigger="20")
    assert (options.min_offsets_per_trigger, options.max_offsets_per_trigger, options.max_trigger_delay_ms) == \
        (10, 20, 15 * 60_000)
    assert parse(streaming=True, minOffsetsPerTrigger="1", maxTriggerDelay="30s").max_trigger_delay_ms == 30_000
    with pytest.raises(InvalidConfig, match="'minOffsetsPerTrigger' \\(30\\) is higher than 'maxOffsetsPerTrigger'"):
        parse(streaming=True, minOffsetsPerTrigger="30", maxOffsetsPerTrigger="20")
    with pytest.raises(InvalidConfig, match="'maxTriggerDelay'"):
        parse(streaming=True, minOffsetsPerTrigger="1", maxTriggerDelay="soon")
    with pytest.raises(InvalidConfig, match="'minOffsetsPerTrigger' must be >= 1"):
        parse(streaming=True, minOffsetsPerTrigger="0")


@pytest.mark.parametrize("text, ms", [("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("250", 250),
                                      ("2h", 7_200_000), ("1d", 86_400_000), ("3min", 180_000)])
def test_durations_as_spark_writes_them(text, ms):
    assert parse_duration_ms(text, "maxTriggerDelay") == ms


@pytest.mark.parametrize("key", ["kafka.auto.offset.reset", "kafka.key.deserializer", "kafka.value.deserializer",
                                 "kafka.enable.auto.commit", "kafka.interceptor.classes"])
def test_kafka_options_kafka_refuses_are_refused(key):
    """KafkaSourceProvider refuses these consumer settings ("Kafka option '...' is not supported")."""
    with pytest.raises(InvalidConfig, match=key.replace(".", r"\.")):
        parse(**{key: "x"})


def test_kafka_options_without_effect_are_accepted():
    options = parse(**{"kafka.bootstrap.servers": "b:9092", "kafka.group.id": "g", "groupIdPrefix": "p",
                       "fetchOffset.numRetries": "3", "kafkaConsumer.pollTimeoutMs": "100"})
    assert options.subscription.topics == ("t",)


def test_sink_refuses_serializers_and_partitioner():
    """Kafka's sink refuses key.serializer/value.serializer; a partitioner.class would change partitions."""
    for key in SINK_REFUSED_KAFKA_OPTIONS:
        with pytest.raises(InvalidConfig, match=key.replace(".", r"\.")):
            refuse_kafka_options({key: "x"}, SINK_REFUSED_KAFKA_OPTIONS)
    refuse_kafka_options({"kafka.acks": "all"}, SINK_REFUSED_KAFKA_OPTIONS)


def test_value_typed_is_off_by_default_and_a_boolean():
    assert parse().value_typed is False
    assert parse(valueTyped="TRUE").value_typed is True
    with pytest.raises(InvalidConfig, match="'valueTyped' must be true or false"):
        parse(valueTyped="yes")
