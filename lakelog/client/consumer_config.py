"""The consumer's configuration and its join request, pure (no I/O): confluent-kafka's settings and
their defaults, the auto.offset.reset and assignor names lakelog knows, `join_body`, `group_path`, `tp_list`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping
from urllib.parse import quote

from lakelog.client.errors import INVALID_ARG, KafkaError, KafkaException
from lakelog.client.message import TopicPartition

if TYPE_CHECKING:
    from lakelog.client.consumer import Consumer

TP = tuple[str, int]
RebalanceCallback = Callable[["Consumer", list[TopicPartition]], None]
CommitCallback = Callable[[KafkaError | None, list[TopicPartition]], None]

DEFAULTS: dict[str, Any] = {
    "group.id": None,
    "auto.offset.reset": "latest",
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5000,
    "session.timeout.ms": 45_000,
    "heartbeat.interval.ms": 3000,
    "max.poll.interval.ms": 300_000,
    "partition.assignment.strategy": "range",
    "group.instance.id": None,
    "max.poll.records": 500,
    "fetch.max.bytes": None,
    "fetch.wait.max.ms": 500,
    "request.timeout.ms": 30_000,
    "default.api.timeout.ms": 60_000,
    "retry.backoff.ms": 100,
    "api.key": None,
    "client.id": None,
    "on_commit": None,
}
RESETS = {"earliest": "earliest", "smallest": "earliest", "beginning": "earliest",
          "latest": "latest", "largest": "latest", "end": "latest", "none": "none", "error": "none"}
STRATEGIES = {"range": "range", "roundrobin": "roundrobin", "cooperative-sticky": "cooperative-sticky"}
MEMBER_GONE = frozenset({"UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID"})


def group_path(group: str | None) -> str:
    """The group's resource path; needs group.id."""
    if not group:
        raise KafkaException(KafkaError(INVALID_ARG, "this needs group.id"))
    return f"/v1/groups/{quote(group, safe='')}"


def tp_list(keys: Iterable[TP], offsets: Mapping[TP, int] | None = None) -> list[TopicPartition]:
    return [TopicPartition(t, p, (offsets or {}).get((t, p), -1001)) for t, p in sorted(keys)]


def join_body(config: Mapping[str, Any], reset: str, strategy: str, topics: list[str]) -> dict[str, Any]:
    """The join request: Kafka's consumer settings by their names, the topics or one pattern."""
    if not topics:
        raise KafkaException(KafkaError(INVALID_ARG, "subscribe to at least one topic or pattern"))
    body: dict[str, Any] = {
        "session.timeout.ms": int(config["session.timeout.ms"]),
        "max.poll.interval.ms": int(config["max.poll.interval.ms"]),
        "auto.offset.reset": reset,
        "enable.auto.commit": bool(config["enable.auto.commit"]),
        "assignor": strategy,
    }
    if config.get("group.instance.id"):
        body["group.instance.id"] = config["group.instance.id"]
    if any(t.startswith("^") for t in topics):
        body["pattern"] = "|".join(f"(?:{t[1:]})" if t.startswith("^") else re.escape(t) for t in topics)
    else:
        body["topics"] = list(topics)
    return body
