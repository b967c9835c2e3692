"""Topic configuration: Kafka's keys, Kafka's defaults, typed and validated.

The catalog stores a topic's config as JSON with Kafka's dotted names. An
unknown key or a bad value is refused with `InvalidConfig` naming the key.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal, Mapping

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from lakelog.platform.errors import InvalidConfig

DAY_MS = 24 * 60 * 60 * 1000
MAX_LONG = 2**63 - 1  # Kafka's LONG configs
MAX_INT = 2**31 - 1  # Kafka's INT configs


def _kafka_number(value: Any) -> Any:
    """Kafka's configs are numbers or their decimal strings (as a CLI or Kafka's admin API sends them); never
    booleans or fractions, which pydantic would otherwise coerce (true -> 1, 1.0 -> 1)."""
    if isinstance(value, bool) or isinstance(value, float):
        raise ValueError(f"must be an integer, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if not text.lstrip("-").isdigit():
            raise ValueError(f"must be an integer, got {value!r}")
        return int(text)
    return value


def _kafka_boolean(value: Any) -> Any:
    """Kafka's BOOLEAN configs: true or false (any case, as its ConfigDef takes them); not 1, yes or on."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {value!r}")
    return value


Long = Annotated[int, BeforeValidator(_kafka_number), Field(le=MAX_LONG)]
Int = Annotated[int, BeforeValidator(_kafka_number), Field(le=MAX_INT)]
Boolean = Annotated[bool, BeforeValidator(_kafka_boolean)]


# Kafka's default message.format.version, and the version strings its MetadataVersion parses (0.8.0 to 3.9,
# an inter-broker protocol's -IV<n>, further segments ignored: "0.10.0.1", "2.8.1").
DEFAULT_MESSAGE_FORMAT_VERSION = "3.0-IV1"
KAFKA_VERSION = r"^(0\.(8\.[0-2]|9\.0|10\.[0-2]|11\.0)|1\.[01]|2\.[0-8]|3\.[0-9])(-IV[0-9]+|(\.[^.]+)*)$"


class TimestampType(int, Enum):
    """Values of the `timestamp_type` column; Spark's Kafka source uses the same numbers."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class TopicConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    retention_ms: Long = Field(7 * DAY_MS, alias="retention.ms", ge=-1)
    retention_bytes: Long = Field(-1, alias="retention.bytes", ge=-1)
    retention_topic_bytes: Long = Field(-1, alias="retention.topic.bytes", ge=-1)
    cleanup_policy: str = Field("delete", alias="cleanup.policy")
    segment_bytes: Int = Field(1024 * 1024 * 1024, alias="segment.bytes", ge=14)
    segment_ms: Long = Field(7 * DAY_MS, alias="segment.ms", ge=1)
    max_message_bytes: Int = Field(1_048_588, alias="max.message.bytes", ge=0)
    # Kafka's bounds on CreateTime timestamps relative to the broker's clock (KIP-937); the default: none.
    message_timestamp_before_max_ms: Long = Field(MAX_LONG, alias="message.timestamp.before.max.ms", ge=0)
    message_timestamp_after_max_ms: Long = Field(MAX_LONG, alias="message.timestamp.after.max.ms", ge=0)
    message_timestamp_type: Literal["CreateTime", "LogAppendTime"] = Field(
        "CreateTime", alias="message.timestamp.type"
    )
    delete_retention_ms: Long = Field(DAY_MS, alias="delete.retention.ms", ge=0)
    min_compaction_lag_ms: Long = Field(0, alias="min.compaction.lag.ms", ge=0)
    file_delete_delay_ms: Long = Field(60_000, alias="file.delete.delay.ms", ge=0)
    # How long, or how many bytes, acknowledged records wait in the node journal before the background commit
    # into the topic's table (what Delta readers see; the node's journal_table_commit_rate paces many topics).
    table_commit_interval_ms: Long = Field(1_000, alias="table.commit.interval.ms", ge=0)
    table_commit_bytes: Long = Field(8 * 1024 * 1024, alias="table.commit.bytes", ge=1)
    replication_factor: Int = Field(1, alias="replication.factor", ge=1, le=32767)
    min_insync_replicas: Int = Field(1, alias="min.insync.replicas", ge=1)
    partitioner: Literal["murmur2", "murmur3"] = "murmur2"
    # How the Kafka listener compresses fetched batches (the records are stored in Parquet either way);
    # "producer": lakelog does not keep a producer's codec, so fetches answer uncompressed.
    compression_type: Literal["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"] = Field(
        "producer", alias="compression.type")
    # Typed topics (Confluent Server's names): only records in Confluent's wire format whose schema id is
    # registered under `<topic>-value` (`-key`) and whose bytes decode with it (platform/schema_registry/
    # validation.py). Bad records are refused, or sent to the dead-letter topic when one is named.
    confluent_value_schema_validation: Boolean = Field(False, alias="confluent.value.schema.validation")
    confluent_key_schema_validation: Boolean = Field(False, alias="confluent.key.schema.validation")
    # Kafka Connect's name for a dead-letter topic; "": none (bad records are refused).
    errors_deadletterqueue_topic_name: str = Field("", alias="errors.deadletterqueue.topic.name", max_length=249,
                                                   pattern=r"^[a-zA-Z0-9._-]*$")  # a topic name, or empty
    # Deprecated in Kafka 3.x and still taken by Kafka 3.9 (clients' tests and old tools set them), with
    # Kafka's effect (`DEPRECATED`): before KIP-937's before/after bounds, one bound on both sides; each
    # of them falls back to it while left at its default, as Kafka's LogConfig does.
    message_timestamp_difference_max_ms: Long = Field(MAX_LONG, alias="message.timestamp.difference.max.ms", ge=0)
    # Ignored since Kafka 3.0 (inter.broker.protocol.version >= 3.0): batches are stored in one format.
    message_format_version: str = Field(DEFAULT_MESSAGE_FORMAT_VERSION, alias="message.format.version",
                                        pattern=KAFKA_VERSION)
    # Fetch v0-v3 are answered in their message format whatever this says (no UNSUPPORTED_VERSION).
    message_downconversion_enable: Boolean = Field(True, alias="message.downconversion.enable")

    @field_validator("cleanup_policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        parts = sorted({p.strip() for p in value.split(",") if p.strip()})
        if not parts or not set(parts) <= {"delete", "compact"}:
            raise ValueError("must be delete, compact, or compact,delete")
        return ",".join(sorted(parts, key=["compact", "delete"].index))

    @property
    def validates_schemas(self) -> bool:
        return self.confluent_value_schema_validation or self.confluent_key_schema_validation

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compacts(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def before_bound(self) -> tuple[int, str]:
        """How far before the broker's clock a CreateTime timestamp may be, and the key that says so."""
        return self._bound(self.message_timestamp_before_max_ms, "message.timestamp.before.max.ms")

    @property
    def after_bound(self) -> tuple[int, str]:
        """How far after the broker's clock a CreateTime timestamp may be, and the key that says so."""
        return self._bound(self.message_timestamp_after_max_ms, "message.timestamp.after.max.ms")

    def _bound(self, value: int, key: str) -> tuple[int, str]:
        if value == MAX_LONG and self.message_timestamp_difference_max_ms != MAX_LONG:
            return self.message_timestamp_difference_max_ms, "message.timestamp.difference.max.ms"
        return value, key

    @property
    def timestamp_type(self) -> TimestampType:
        if self.message_timestamp_type == "LogAppendTime":
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    def to_kafka(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)

    def altered(self, changes: Mapping[str, Any]) -> TopicConfig:
        return parse_topic_config({**self.to_kafka(), **changes})


KNOWN_KEYS = frozenset(f.alias or name for name, f in TopicConfig.model_fields.items())
DEPRECATED = {  # key -> what setting it does here (logged when a topic is given a value other than the default)
    "message.format.version": "ignored, as by Kafka since 3.0 (inter.broker.protocol.version >= 3.0); deprecated "
                              "and removed in Kafka 4.0",
    "message.timestamp.difference.max.ms": "deprecated (Kafka 3.6, KIP-937): it bounds timestamps on both sides "
                                           "where message.timestamp.before.max.ms / after.max.ms are left at their "
                                           "defaults; set those instead",
    "message.downconversion.enable": "no effect: lakelog answers Fetch v0-v3 in the message format they read "
                                     "whatever it says; a no-op in Kafka 4.0",
}


def deprecated_settings(config: TopicConfig, before: TopicConfig | None = None) -> list[str]:
    """What a topic's deprecated keys do, one line each, for those it sets (other than the default) and that
    `before` (the config it had) did not set to the same: the log lines of a create or an alter."""
    now, then, defaults = config.to_kafka(), (before or DEFAULT_CONFIG).to_kafka(), DEFAULT_CONFIG.to_kafka()
    return [f"{key}={str(now[key]).lower() if isinstance(now[key], bool) else now[key]}: {effect}"
            for key, effect in DEPRECATED.items()
            if now[key] != defaults[key] and (before is None or now[key] != then[key])]


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


DEFAULT_CONFIG = parse_topic_config(None)
