"""The source options of Spark's Kafka source, parsed and checked once on the driver.

`subscribe` | `subscribePattern` | `assign` choose topics; `startingTimestamp` >
`startingOffsetsByTimestamp` > `startingOffsets` choose where to start and
`endingTimestamp` > `endingOffsetsByTimestamp` > `endingOffsets` where a batch
query ends (the first one given wins, as in Kafka; offsets JSON uses -2 =
earliest and -1 = latest); `maxOffsetsPerTrigger`, `minOffsetsPerTrigger`,
`maxTriggerDelay`, `minPartitions`, `maxRecordsPerPartition`, `failOnDataLoss`,
`includeHeaders` as in Kafka; `valueTyped` (lakelog's own, default false) adds a typed topic's
`value_typed` struct column (typed.py). Whatever Kafka refuses is refused here with the
same rule. Options that cannot change which records a query returns
(`groupIdPrefix`, `fetchOffset.*`, most `kafka.*`) are ignored, as Spark's Kafka
source ignores unknown ones, so a Kafka query moves over by changing the format
and connection options.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lakelog.platform.broker.reader import TopicReader
from lakelog.platform.errors import InvalidConfig, UnknownTopicOrPartition
from lakelog.platform.records import TopicPartition
from lakelog.spark_jobs.connection import Connection

EARLIEST, LATEST = -2, -1


@dataclass(frozen=True)
class Subscription:
    kind: str  # subscribe | subscribePattern | assign
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assignment: tuple[TopicPartition, ...] = ()

    def resolve(self, reader: TopicReader) -> list[TopicPartition]:
        """The topic-partitions to read now (partitions added since last time included)."""
        metas = {m.name: m for m in reader.list_topics()}
        if self.kind == "assign":
            for topic, partition in self.assignment:
                if topic not in metas or partition >= metas[topic].partitions:
                    raise UnknownTopicOrPartition(f"assigned partition {topic}-{partition} does not exist")
            return sorted(self.assignment)
        if self.kind == "subscribe":
            missing = [t for t in self.topics if t not in metas]
            if missing:
                raise UnknownTopicOrPartition(f"subscribed topic {missing[0]!r} does not exist")
            names = list(self.topics)
        else:
            regex = re.compile(self.pattern)
            names = [n for n in metas if regex.fullmatch(n)]
        return sorted((n, p) for n in set(names) for p in range(metas[n].partitions))


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: `earliest`/`latest`, offsets per partition, or timestamps.

    `option` is the option it came from, so errors name what the user wrote.
    A timestamp maps to the earliest offset whose timestamp is at or after it
    (Kafka's offsetsForTimes); with no such record it is an error when
    `fail_if_no_match` (starting, strategy `error`), else the log end.
    """

    kind: str  # default | earliest | latest | offsets | timestamp | timestamps
    offsets: dict[str, dict[str, int]] | None = None
    timestamp_ms: int | None = None
    fail_if_no_match: bool = True
    option: str = ""

    def resolve(self, reader: TopicReader, partitions: list[TopicPartition], default: str) -> dict[TopicPartition, int]:
        if self.offsets is not None:
            check_names_every_partition(self.offsets, partitions, self.option)
        return {tp: self._one(reader, tp, default) for tp in partitions}

    def _one(self, reader: TopicReader, tp: TopicPartition, default: str) -> int:
        topic, partition = tp
        if self.kind in ("earliest", "latest"):
            return reader.list_offset(topic, partition, self.kind)
        if self.kind == "default":
            return reader.list_offset(topic, partition, default)
        if self.kind == "timestamp":
            return _offset_for_time(reader, topic, partition, int(self.timestamp_ms or 0), self)
        value = (self.offsets or {})[topic][str(partition)]
        if self.kind == "timestamps":
            return _offset_for_time(reader, topic, partition, value, self)
        if value == EARLIEST:
            return reader.list_offset(topic, partition, "earliest")
        if value == LATEST:
            return reader.list_offset(topic, partition, "latest")
        return value


def check_names_every_partition(offsets: dict[str, dict[str, int]], partitions: list[TopicPartition],
                                option: str) -> None:
    """Per-partition JSON must name exactly the partitions read, as Kafka asserts: a partition left out
    would otherwise start (or end) somewhere the user never chose."""
    named = {(t, int(p)) for t, ps in offsets.items() for p in ps}
    missing, extra = sorted(set(partitions) - named), sorted(named - set(partitions))
    if missing or extra:
        detail = "; ".join(part for part in (
            f"missing {', '.join(f'{t}-{p}' for t, p in missing)}" if missing else "",
            f"not subscribed {', '.join(f'{t}-{p}' for t, p in extra)}" if extra else "") if part)
        raise InvalidConfig(f"option {option!r} must name every partition of the subscribed topics, and only "
                            f"those ({detail}); use -2 for earliest and -1 for latest")


def _offset_for_time(reader: TopicReader, topic: str, partition: int, ts: int, spec: OffsetSpec) -> int:
    log = reader.topic_log(topic)
    log.refresh()
    found = log.offset_for_timestamp(partition, ts)
    if found is not None:
        return found
    if spec.fail_if_no_match:
        raise InvalidConfig(f"option {spec.option!r}: no record at or after timestamp {ts} in {topic}-{partition}; "
                            "set startingOffsetsByTimestampStrategy=latest to start at the log end instead")
    return log.log_end_offset(partition)


@dataclass(frozen=True)
class SourceOptions:
    connection: Connection
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    include_headers: bool
    value_typed: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> SourceOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        connection = Connection.from_options(opts)
        refuse_kafka_options(opts, SOURCE_REFUSED_KAFKA_OPTIONS)
        isolation = opts.get("kafka.isolation.level", "read_committed")
        if isolation not in ("read_committed", "read_uncommitted"):  # both read the same: the table's records
            raise InvalidConfig(f"kafka.isolation.level must be read_committed or read_uncommitted, got {isolation!r}")
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
        if strategy not in ("error", "latest"):
            raise InvalidConfig(f"startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}")
        starting = _starting(opts, strategy == "error")
        ending = _ending(opts, streaming)
        if not streaming:
            _check_batch_bounds(starting, ending)
        max_offsets = _positive(opts, "maxOffsetsPerTrigger")
        min_offsets = _positive(opts, "minOffsetsPerTrigger")
        if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
            raise InvalidConfig(f"option 'minOffsetsPerTrigger' ({min_offsets}) is higher than "
                                f"'maxOffsetsPerTrigger' ({max_offsets})")
        return cls(
            connection=connection,
            subscription=parse_subscription(opts),
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=max_offsets,
            min_offsets_per_trigger=min_offsets,
            max_trigger_delay_ms=parse_duration_ms(opts.get("maxtriggerdelay", DEFAULT_MAX_TRIGGER_DELAY),
                                                   "maxTriggerDelay"),
            min_partitions=_positive(opts, "minPartitions"),
            max_records_per_partition=_positive(opts, "maxRecordsPerPartition"),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            include_headers=_bool(opts, "includeHeaders", False),
            value_typed=_bool(opts, "valueTyped", False),
        )


DEFAULT_MAX_TRIGGER_DELAY = "15m"  # Kafka's default

# kafka.* options Spark's Kafka source refuses (KafkaSourceProvider.validateGeneralOptions): refused here too,
# so a query that Kafka would reject is not silently accepted.
SOURCE_REFUSED_KAFKA_OPTIONS = {
    "kafka.auto.offset.reset": "set the source option 'startingOffsets' to earliest or latest instead",
    "kafka.key.deserializer": "keys are bytes; deserialize them with DataFrame operations",
    "kafka.value.deserializer": "values are bytes; deserialize them with DataFrame operations",
    "kafka.enable.auto.commit": "the query's checkpoint tracks offsets",
    "kafka.interceptor.classes": "interceptors could change records",
}


# kafka.* options of Spark's Kafka sink that would change what is written: the serializers (Kafka refuses
# them too) and the partitioner (Kafka would use it; lakelog partitions by the `partition` column or
# murmur2 of the key, so ignoring it would put records in other partitions than the user asked for).
SINK_REFUSED_KAFKA_OPTIONS = {
    "kafka.key.serializer": "keys are written as bytes",
    "kafka.value.serializer": "values are written as bytes",
    "kafka.partitioner.class": "records go to the 'partition' column's partition, else murmur2 of the key "
                               "(Kafka's default partitioner); set the 'partition' column to choose",
}


def refuse_kafka_options(opts: Mapping[str, str], refused: Mapping[str, str]) -> None:
    for key, why in refused.items():
        if key in opts:
            raise InvalidConfig(f"option '{key}' is not supported (as in Spark's Kafka connector): {why}")


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """A batch query reads a fixed range: it cannot start at the end or end at the start (Kafka's rule)."""
    _refuse_in_batch(starting, "latest", LATEST)
    _refuse_in_batch(ending, "earliest", EARLIEST)


def _refuse_in_batch(spec: OffsetSpec, word: str, value: int) -> None:
    if spec.kind == word:
        raise InvalidConfig(f"option {spec.option!r} cannot be {word} for batch queries")
    if spec.kind == "offsets":  # not "timestamps": there the JSON values are times, not offsets
        for topic, partition in _partitions_with(spec, value):
            raise InvalidConfig(f"option {spec.option!r} for {topic}-{partition} cannot be {value} ({word}) "
                                "for batch queries")


def _partitions_with(spec: OffsetSpec, value: int) -> list[TopicPartition]:
    return sorted((t, int(p)) for t, ps in (spec.offsets or {}).items() for p, o in ps.items() if o == value)


_DURATION = re.compile(r"(-?\d+)\s*(us|ms|s|m|min|h|d)?")
_DURATION_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(value: str, name: str) -> int:
    """A duration as Spark writes them (`15m`, `30s`, `500ms`; a bare number is ms), in milliseconds."""
    match = _DURATION.fullmatch(value.strip().lower())
    if not match:
        raise InvalidConfig(f"option {name!r} must be a duration like 15m, 30s or 500ms, got {value!r}")
    ms = int(int(match.group(1)) * _DURATION_MS[match.group(2) or "ms"])
    if ms < 0:
        raise InvalidConfig(f"option {name!r} must not be negative, got {value!r}")
    return ms


def parse_subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(given) != 1:
        raise InvalidConfig("exactly one of the options 'subscribe', 'subscribePattern' and 'assign' is required, "
                            f"got {len(given)}")
    kind = given[0]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise InvalidConfig("option 'subscribe' names no topic")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(opts["subscribepattern"])
        except re.error as exc:
            raise InvalidConfig(f"option 'subscribePattern' is not a valid regex: {exc}") from None
        return Subscription("subscribePattern", pattern=opts["subscribepattern"])
    parsed = _json(opts["assign"], "assign")
    try:
        pairs = tuple(sorted((str(t), int(p)) for t, ps in parsed.items() for p in ps))
    except (AttributeError, TypeError, ValueError):
        raise InvalidConfig('option \'assign\' must be JSON like {"topicA":[0,1]}') from None
    if not pairs:
        raise InvalidConfig("option 'assign' names no partition")
    return Subscription("assign", assignment=pairs)


def _starting(opts: Mapping[str, str], fail_if_no_match: bool) -> OffsetSpec:
    return _bound(opts, "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets", fail_if_no_match)


def _ending(opts: Mapping[str, str], streaming: bool) -> OffsetSpec:
    if streaming:
        # Kafka refuses the first two in streaming queries and ignores endingTimestamp; ignoring an option
        # that would change results is what this source never does, so all three are refused.
        for name in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"):
            if name.lower() in opts:
                raise InvalidConfig(f"option {name!r} is for batch queries only")
        return OffsetSpec("latest", option="endingOffsets")
    # An ending timestamp with no record at or after it ends at the log end (Kafka: "set to latest").
    return _bound(opts, "endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets", fail_if_no_match=False)


def _bound(opts: Mapping[str, str], timestamp: str, by_timestamp: str, offsets: str,
           fail_if_no_match: bool) -> OffsetSpec:
    """One end of the range from the first option given, in Kafka's order of precedence:
    the global timestamp, then per-partition timestamps, then offsets."""
    if timestamp.lower() in opts:
        return OffsetSpec("timestamp", None, _int(opts[timestamp.lower()].strip(), timestamp), fail_if_no_match,
                          timestamp)
    if by_timestamp.lower() in opts:
        return OffsetSpec("timestamps", _per_partition(opts[by_timestamp.lower()], by_timestamp), None,
                          fail_if_no_match, by_timestamp)
    return _offsets(opts.get(offsets.lower()), offsets)


def _offsets(value: str | None, name: str) -> OffsetSpec:
    if value is None:
        return OffsetSpec("default", option=name)
    lowered = value.strip().lower()
    if lowered in ("earliest", "latest"):
        return OffsetSpec(lowered, option=name)
    return OffsetSpec("offsets", _per_partition(value, name), option=name)


def _per_partition(value: str, name: str) -> dict[str, dict[str, int]]:
    parsed = _json(value, name)
    try:
        return {str(t): {str(int(p)): int(o) for p, o in ps.items()} for t, ps in parsed.items()}
    except (AttributeError, TypeError, ValueError):
        raise InvalidConfig(f'option {name!r} must be JSON like {{"topicA":{{"0":23,"1":-1}}}}') from None


def _json(value: str, name: str) -> Any:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise InvalidConfig(f"option {name!r} is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidConfig(f"option {name!r} must be a JSON object")
    return parsed


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidConfig(f"option {name!r} must be an integer, got {value!r}") from None


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    if name.lower() not in opts:
        return None
    number = _int(opts[name.lower()].strip(), name)
    if number < 1:
        raise InvalidConfig(f"option {name!r} must be >= 1, got {number}")
    return number


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    if name.lower() not in opts:
        return default
    value = opts[name.lower()].strip().lower()
    if value not in ("true", "false"):
        raise InvalidConfig(f"option {name!r} must be true or false, got {opts[name.lower()]!r}")
    return value == "true"
