"""Records a share group gave up on (rejected, or archived at the delivery limit), written to a dead-letter
topic with headers saying why: KIP-1191's idea, ahead of Kafka. The topic is the group's
`errors.deadletterqueue.topic.name`, else the record's topic's own.

Written before the archiving is saved: a crash in between dead-letters the record again (at least once),
never not at all.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from lakelog.platform.broker.node import Broker
from lakelog.platform.errors import LakelogError, TopicAlreadyExists, UnknownTopicOrPartition
from lakelog.platform.records import Record
from lakelog.platform.share.partition import Archived

log = logging.getLogger(__name__)

REASON, GROUP, TOPIC, PARTITION, OFFSET, DELIVERIES = (
    "lakelog.dlq.reason", "lakelog.dlq.group", "lakelog.dlq.topic", "lakelog.dlq.partition", "lakelog.dlq.offset",
    "lakelog.dlq.delivery.count")


def dead_letter_topic(broker: Broker, group_topic: str, topic: str) -> str:
    if group_topic:
        return group_topic
    try:
        return broker.topic(topic).config.errors_deadletterqueue_topic_name
    except LakelogError:
        return ""


def write(broker: Broker, group: str, topic: str, partition: int, archived: Sequence[Archived], to: str) -> int:
    """Copy the archived records of `topic`-`partition` to the topic `to`; answers how many were written (a
    record no longer in the log, removed by retention, is skipped)."""
    if not archived or not to or to == topic:
        return 0
    reasons = {a.offset: a for a in archived}
    records: list[Record] = []
    for first, last in _runs(sorted(reasons)):
        fetched = broker.fetch(topic, partition, first, max_records=last - first + 1)
        table = fetched.records
        for offset, key, value, headers, stamp in zip(*(table.column(n).to_pylist() for n in (
                "offset", "key", "value", "headers", "timestamp"))):
            why = reasons.get(offset)
            if why is None or offset > last:
                continue
            extra = [(REASON, why.reason), (GROUP, group), (TOPIC, topic), (PARTITION, str(partition)),
                     (OFFSET, str(offset)), (DELIVERIES, str(why.delivery_count))]
            kept = [(h["key"], h["value"]) for h in headers or []]
            records.append(Record(value=value, key=key, headers=kept + [(k, v.encode()) for k, v in extra],
                                  timestamp_ms=_ms(stamp)))
    if records:
        _ensure_topic(broker, to)
        broker.produce(to, records)
        log.info("share group %r: %d record(s) of %s-%d dead-lettered to %r", group, len(records), topic,
                 partition, to)
    return len(records)


def _ensure_topic(broker: Broker, name: str) -> None:
    """The dead-letter topic, created (one partition, the defaults) the first time a record goes there: a
    dead letter must not be dropped for want of its topic."""
    try:
        broker.topic(name)
    except UnknownTopicOrPartition:
        try:
            broker.create_topic(name, 1)
            log.info("dead-letter topic %r created", name)
        except TopicAlreadyExists:
            pass


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and runs[-1][1] + 1 == offset:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


def _ms(stamp: object) -> int | None:
    timestamp = getattr(stamp, "timestamp", None)
    return int(timestamp() * 1000) if callable(timestamp) else None
