"""Topic configuration: Kafka's keys, Kafka's defaults, typed and validated.

The catalog stores a topic's config as JSON with Kafka's dotted names. An
unknown key or a bad value is refused with `InvalidConfig` naming the key.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lakelog.platform.errors import InvalidConfig

DAY_MS = 24 * 60 * 60 * 1000


class TimestampType(int, Enum):
    """Values of the `timestamp_type` column; Spark's Kafka source uses the same numbers."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class TopicConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    retention_ms: int = Field(7 * DAY_MS, alias="retention.ms", ge=-1)
    retention_bytes: int = Field(-1, alias="retention.bytes", ge=-1)
    retention_topic_bytes: int = Field(-1, alias="retention.topic.bytes", ge=-1)
    cleanup_policy: str = Field("delete", alias="cleanup.policy")
    segment_bytes: int = Field(1024 * 1024 * 1024, alias="segment.bytes", ge=14)
    segment_ms: int = Field(7 * DAY_MS, alias="segment.ms", ge=1)
    max_message_bytes: int = Field(1_048_588, alias="max.message.bytes", ge=0)
    message_timestamp_type: Literal["CreateTime", "LogAppendTime"] = Field(
        "CreateTime", alias="message.timestamp.type"
    )
    delete_retention_ms: int = Field(DAY_MS, alias="delete.retention.ms", ge=0)
    min_compaction_lag_ms: int = Field(0, alias="min.compaction.lag.ms", ge=0)
    file_delete_delay_ms: int = Field(60_000, alias="file.delete.delay.ms", ge=0)
    replication_factor: int = Field(1, alias="replication.factor", ge=1)
    min_insync_replicas: int = Field(1, alias="min.insync.replicas", ge=1)
    partitioner: Literal["murmur2", "murmur3"] = "murmur2"

    @field_validator("cleanup_policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        parts = sorted({p.strip() for p in value.split(",") if p.strip()})
        if not parts or not set(parts) <= {"delete", "compact"}:
            raise ValueError("must be delete, compact, or compact,delete")
        return ",".join(sorted(parts, key=["compact", "delete"].index))

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compacts(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def timestamp_type(self) -> TimestampType:
        if self.message_timestamp_type == "LogAppendTime":
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    def to_kafka(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)

    def altered(self, changes: Mapping[str, Any]) -> "TopicConfig":
        return parse_topic_config({**self.to_kafka(), **changes})


KNOWN_KEYS = frozenset(f.alias or name for name, f in TopicConfig.model_fields.items())


def parse_topic_config(values: Mapping[str, Any] | None) -> TopicConfig:
    """Build a TopicConfig from Kafka-named keys; values may be strings (as from a CLI)."""
    values = dict(values or {})
    unknown = sorted(set(values) - KNOWN_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown config key {unknown[0]!r}; known keys: {', '.join(sorted(KNOWN_KEYS))}")
    try:
        return TopicConfig.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0]) if error["loc"] else "config"
        raise InvalidConfig(f"invalid value {values.get(key)!r} for {key}: {error['msg']}") from None
