"""What `kafka-consumer-groups.sh` computes, with no HTTP or CLI framework: the target offsets of a
reset (`--to-earliest`, `--to-latest`, `--to-datetime`, `--to-offset`, `--shift-by`), clamped to
[log start, log end] as Kafka does, and the per-partition lag rows of a group's description.

The coordinator plans and commits resets with these functions; the HTTP tier and the CLI both call
the coordinator.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Callable, Literal, Protocol

from lakelog.platform.errors import InvalidRequest, UnknownTopicOrPartition
from lakelog.platform.groups.classic import consumer_assignment, consumer_subscription
from lakelog.platform.groups.membership import Group
from lakelog.platform.groups.offsets import CommittedOffset
from lakelog.platform.records import TopicPartition

ResetKind = Literal["earliest", "latest", "timestamp", "offset", "shift"]
RESET_KINDS: tuple[str, ...] = ("earliest", "latest", "timestamp", "offset", "shift")


class Offsets(Protocol):
    """What a reset needs of the broker."""

    def list_offset(self, topic: str, partition: int, spec: str | int) -> int: ...


@dataclass(frozen=True)
class ResetSpec:
    """Where to move offsets: `value` is the timestamp (ms), the offset or the shift."""

    kind: ResetKind
    value: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in RESET_KINDS:
            raise InvalidRequest(f"reset must be one of {', '.join(RESET_KINDS)}, got {self.kind!r}")
        if self.kind in ("timestamp", "offset", "shift") and self.value is None:
            raise InvalidRequest(f"a reset to {self.kind} needs a value")
        if self.kind in ("timestamp", "offset") and self.value is not None and self.value < 0:
            raise InvalidRequest(f"a reset to {self.kind} needs a value >= 0, got {self.value}")

    @classmethod
    def of(cls, spec: str | int) -> ResetSpec:
        """The HTTP form: `earliest`, `latest` or a timestamp in ms."""
        if isinstance(spec, int) and not isinstance(spec, bool):
            return cls("timestamp", spec)
        if spec == "earliest":
            return cls("earliest")
        if spec == "latest":
            return cls("latest")
        raise InvalidRequest(f"reset to earliest, latest or a timestamp (ms), got {spec!r}")


@dataclass(frozen=True)
class ResetTarget:
    """One partition of a reset plan: its committed offset now (None: none) and where it moves."""

    topic: str
    partition: int
    current: int | None
    target: int


@dataclass(frozen=True)
class PartitionLag:
    """One row of a group's description, as `kafka-consumer-groups.sh --describe` prints it."""

    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    consumer_id: str | None


def datetime_ms(text: str) -> int:
    """An ISO-8601 date-time (`2026-11-21T18:00:00`, `...T18:00:00.250+01:00`, `...Z`) as epoch ms;
    UTC when it names no offset."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(f"not an ISO-8601 date-time: {text!r} (e.g. 2026-11-21T18:00:00 or "
                             "2026-11-21T18:00:00+01:00)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def clamp(offset: int, log_start: int, log_end: int) -> int:
    """Kafka's reset rule: an offset below the log start moves to it, one past the log end to it."""
    return min(max(offset, log_start), log_end)


def target_offset(spec: ResetSpec, current: int | None, log_start: int, log_end: int,
                  offset_at_time: int | None = None) -> int:
    """The offset a partition moves to. `offset_at_time` is the broker's answer for `spec.value` when
    resetting to a timestamp (the earliest offset at or after it; the log end when none)."""
    if spec.kind == "earliest":
        return log_start
    if spec.kind == "latest":
        return log_end
    if spec.kind == "timestamp":
        if offset_at_time is None:
            raise InvalidRequest("a reset to a timestamp needs the offset at that time")
        return clamp(offset_at_time, log_start, log_end)
    assert spec.value is not None  # checked by ResetSpec
    if spec.kind == "offset":
        return clamp(spec.value, log_start, log_end)
    if current is None:  # Kafka refuses too: a shift is relative to the committed offset
        raise InvalidRequest("cannot shift a partition without a committed offset: reset it to an offset first")
    return clamp(current + spec.value, log_start, log_end)


def reset_partitions(partition_count: Callable[[str], int], committed: dict[TopicPartition, CommittedOffset],
                     topics: list[tuple[str, int | None]] | None) -> list[TopicPartition]:
    """The partitions a reset touches: `(topic, partition)` as named, `(topic, None)` for all of a
    topic's partitions, or every topic with committed offsets when `topics` is None."""
    if topics is None:
        named: list[tuple[str, int | None]] = [(t, None) for t in sorted({t for t, _ in committed})]
    else:
        named = topics
    chosen: set[TopicPartition] = set()
    for topic, partition in named:
        count = partition_count(topic)
        if partition is None:
            chosen.update((topic, p) for p in range(count))
        elif 0 <= partition < count:
            chosen.add((topic, partition))
        else:
            raise UnknownTopicOrPartition(
                f"unknown partition {partition} of topic {topic!r} (partitions 0..{count - 1})")
    if not chosen:
        raise InvalidRequest("nothing to reset: name topics, or commit offsets first")
    return sorted(chosen)


def plan_reset(log: Offsets, committed: dict[TopicPartition, CommittedOffset], spec: ResetSpec,
               partitions: list[TopicPartition]) -> list[ResetTarget]:
    """Each partition's current committed offset and its target; nothing is written."""
    plan = []
    for topic, partition in partitions:
        start = log.list_offset(topic, partition, "earliest")
        end = log.list_offset(topic, partition, "latest")
        at_time = (log.list_offset(topic, partition, spec.value)
                   if spec.kind == "timestamp" and spec.value is not None else None)
        current = committed[(topic, partition)].offset if (topic, partition) in committed else None
        if spec.kind == "shift" and current is None:
            raise InvalidRequest(f"cannot shift {topic}-{partition}: it has no committed offset "
                                 "(reset it to an offset, earliest or latest first)")
        plan.append(ResetTarget(topic, partition, current, target_offset(spec, current, start, end, at_time)))
    return plan


def lag_rows(offsets: dict[TopicPartition, CommittedOffset], log_ends: dict[TopicPartition, int],
             owners: dict[TopicPartition, str]) -> list[PartitionLag]:
    """One row per partition the group committed or a member owns; lag = log end - committed
    (unknown without a commit, with a negative one or when the topic is gone)."""
    rows = []
    for tp in sorted(set(offsets) | set(owners)):
        current = offsets[tp].offset if tp in offsets else None
        end = log_ends.get(tp)
        # below 0: a client's marker (-1, -2)
        lag = max(end - current, 0) if end is not None and current is not None and current >= 0 else None
        rows.append(PartitionLag(tp[0], tp[1], current, end, lag, owners.get(tp)))
    return rows


def subscribed_topics(group: Group) -> set[str] | None:
    """The topics the group's active members read (subscribed or assigned); None: members of a protocol
    other than the consumer one, whose subscriptions cannot be read."""
    topics = {t for m in group.members.values() for t in (*m.options.topics, *(tp[0] for tp in m.assignment))}
    classic = group.classic
    if classic is not None and classic.members:
        if classic.protocol_type != "consumer":
            return None
        for m in classic.members.values():
            topics.update(consumer_subscription(m.metadata(classic.protocol_name)))
            topics.update(t for t, _ in consumer_assignment(m.assignment))
    return topics
