"""A share group's configs (Kafka's GROUP resource configs of KIP-932), with the broker's defaults beneath.

Kafka's four record configs, plus `errors.deadletterqueue.topic.name` (KIP-1191, ahead of Kafka): where the
records rejected or archived at the delivery limit go, with headers saying why. A group without it falls back
to the topic's own `errors.deadletterqueue.topic.name`, as typed topics use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lakelog.platform.errors import InvalidConfig
from lakelog.settings import GroupSettings

AUTO_OFFSET_RESET = "share.auto.offset.reset"
LOCK_DURATION = "share.record.lock.duration.ms"
DELIVERY_LIMIT = "share.delivery.count.limit"
ISOLATION_LEVEL = "share.isolation.level"
DEAD_LETTER_TOPIC = "errors.deadletterqueue.topic.name"
NAMES = (AUTO_OFFSET_RESET, LOCK_DURATION, DELIVERY_LIMIT, ISOLATION_LEVEL, DEAD_LETTER_TOPIC)
DURATION = re.compile(r"^by_duration:P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$")


@dataclass(frozen=True)
class ShareConfig:
    auto_offset_reset: str  # "latest", "earliest" or "by_duration:<ISO-8601 duration>"
    lock_ms: int
    delivery_limit: int
    isolation_level: str  # read_uncommitted | read_committed: the same in lakelog (open transactions' records
    # are kept outside the table until they commit)
    dead_letter_topic: str


def defaults(settings: GroupSettings) -> dict[str, str]:
    return {AUTO_OFFSET_RESET: "latest", LOCK_DURATION: str(settings.group_share_record_lock_duration_ms),
            DELIVERY_LIMIT: str(settings.group_share_delivery_count_limit), ISOLATION_LEVEL: "read_uncommitted",
            DEAD_LETTER_TOPIC: ""}


def resolve(settings: GroupSettings, overrides: dict[str, str]) -> ShareConfig:
    merged = {**defaults(settings), **overrides}
    return ShareConfig(merged[AUTO_OFFSET_RESET], int(merged[LOCK_DURATION]), int(merged[DELIVERY_LIMIT]),
                       merged[ISOLATION_LEVEL], merged[DEAD_LETTER_TOPIC])


def check(name: str, value: str | None) -> None:
    """Raise InvalidConfig unless `value` (None: back to the default) is one the group config takes."""
    if name not in NAMES:
        raise InvalidConfig(f"{name!r} is not a share group config lakelog serves (it serves {', '.join(NAMES)})")
    if value is None:
        return
    if name == AUTO_OFFSET_RESET and value not in ("latest", "earliest") and not DURATION.match(value):
        raise InvalidConfig(f"{name} must be latest, earliest or by_duration:<ISO-8601 duration>, not {value!r}")
    if name == ISOLATION_LEVEL and value not in ("read_uncommitted", "read_committed"):
        raise InvalidConfig(f"{name} must be read_uncommitted or read_committed, not {value!r}")
    if name == LOCK_DURATION and not (value.isdigit() and 1_000 <= int(value) <= 3_600_000):
        raise InvalidConfig(f"{name} must be from 1000 to 3600000 ms, not {value!r}")
    if name == DELIVERY_LIMIT and not (value.isdigit() and 2 <= int(value) <= 10):
        raise InvalidConfig(f"{name} must be from 2 to 10, not {value!r}")
    if name == DEAD_LETTER_TOPIC and len(value) > 249:
        raise InvalidConfig(f"{name} is longer than a topic name may be")


def duration_ms(reset: str) -> int:
    """The look-back of `by_duration:P...`, in ms."""
    match = DURATION.match(reset)
    if match is None:
        raise InvalidConfig(f"not a by_duration reset: {reset!r}")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000
