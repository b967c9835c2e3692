"""The source options of Spark's Kafka source, parsed and checked once on the driver.

`subscribe` | `subscribePattern` | `assign` choose topics; `startingOffsets`,
`endingOffsets` (earliest, latest, or per-partition JSON with -2 = earliest
and -1 = latest), `startingTimestamp`, `startingOffsetsByTimestamp` choose
where to start; `maxOffsetsPerTrigger`, `minPartitions`, `failOnDataLoss`,
`includeHeaders` as in Kafka. Options this source does not need (`kafka.*`,
`groupIdPrefix`, ...) are ignored, as Spark's Kafka source ignores unknown ones,
so a Kafka query moves over by changing the format and connection options.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from lakelog.platform import Broker
from lakelog.platform.errors import InvalidConfig, UnknownTopicOrPartition
from lakelog.spark_jobs.connection import Connection

EARLIEST, LATEST = -2, -1
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Subscription:
    kind: str  # subscribe | subscribePattern | assign
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assignment: tuple[TopicPartition, ...] = ()

    def resolve(self, broker: Broker) -> list[TopicPartition]:
        """The topic-partitions to read now (partitions added since last time included)."""
        metas = {m.name: m for m in broker.list_topics()}
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
    """Where to start or end: `earliest`/`latest`, offsets per partition, or timestamps."""

    kind: str  # earliest | latest | offsets | timestamp | timestamps
    offsets: dict[str, dict[str, int]] | None = None
    timestamp_ms: int | None = None
    fail_if_no_match: bool = True

    def resolve(self, broker: Broker, partitions: list[TopicPartition], default: str) -> dict[TopicPartition, int]:
        return {tp: self._one(broker, tp, default) for tp in partitions}

    def _one(self, broker: Broker, tp: TopicPartition, default: str) -> int:
        topic, partition = tp
        if self.kind in ("earliest", "latest"):
            return broker.list_offset(topic, partition, self.kind)
        if self.kind == "timestamp" or self.kind == "timestamps":
            ts = self.timestamp_ms if self.kind == "timestamp" else (self.offsets or {}).get(topic, {}).get(
                str(partition))
            if ts is None:
                return broker.list_offset(topic, partition, default)
            return _offset_for_time(broker, topic, partition, int(ts), self.fail_if_no_match)
        value = (self.offsets or {}).get(topic, {}).get(str(partition))
        if value is None or value == (EARLIEST if default == "earliest" else LATEST):
            return broker.list_offset(topic, partition, default)
        if value == EARLIEST:
            return broker.list_offset(topic, partition, "earliest")
        if value == LATEST:
            return broker.list_offset(topic, partition, "latest")
        return int(value)


def _offset_for_time(broker: Broker, topic: str, partition: int, ts: int, fail: bool) -> int:
    log = broker.topic_log(topic)
    log.refresh()
    found = log.offset_for_timestamp(partition, ts)
    if found is not None:
        return found
    if fail:
        raise InvalidConfig(f"no record at or after timestamp {ts} in {topic}-{partition}; set "
                            "startingOffsetsByTimestampStrategy=latest to start at the log end instead")
    return log.log_end_offset(partition)


@dataclass(frozen=True)
class SourceOptions:
    connection: Connection
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> "SourceOptions":
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        connection = Connection.from_options(opts)
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
        if strategy not in ("error", "latest"):
            raise InvalidConfig(f"startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}")
        starting = _starting(opts, strategy == "error")
        ending = _ending(opts, streaming)
        return cls(
            connection=connection,
            subscription=_subscription(opts),
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger"),
            min_partitions=_positive(opts, "minpartitions"),
            fail_on_data_loss=_bool(opts, "failondataloss", True),
            include_headers=_bool(opts, "includeheaders", False),
        )


def _subscription(opts: Mapping[str, str]) -> Subscription:
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
    if opts.get("startingoffsetsbytimestamp"):
        return OffsetSpec("timestamps", _per_partition(opts["startingoffsetsbytimestamp"],
                                                       "startingOffsetsByTimestamp"), None, fail_if_no_match)
    if opts.get("startingtimestamp"):
        return OffsetSpec("timestamp", None, _int(opts["startingtimestamp"], "startingTimestamp"), fail_if_no_match)
    return _offsets(opts.get("startingoffsets"), "startingOffsets")


def _ending(opts: Mapping[str, str], streaming: bool) -> OffsetSpec:
    if streaming and opts.get("endingoffsets"):
        raise InvalidConfig("option 'endingOffsets' is for batch queries only")
    spec = _offsets(opts.get("endingoffsets") or "latest", "endingOffsets")
    if spec.kind == "earliest":
        raise InvalidConfig("option 'endingOffsets' cannot be earliest")
    return spec


def _offsets(value: str | None, name: str) -> OffsetSpec:
    if value is None:
        return OffsetSpec("default")
    lowered = value.strip().lower()
    if lowered in ("earliest", "latest"):
        return OffsetSpec(lowered)
    return OffsetSpec("offsets", _per_partition(value, name))


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


def _positive(opts: Mapping[str, str], key: str) -> int | None:
    if key not in opts:
        return None
    number = _int(opts[key], key)
    if number < 1:
        raise InvalidConfig(f"option {key!r} must be >= 1, got {number}")
    return number


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    if key not in opts:
        return default
    value = opts[key].strip().lower()
    if value not in ("true", "false"):
        raise InvalidConfig(f"option {key!r} must be true or false, got {opts[key]!r}")
    return value == "true"
