"""Request and response bodies of the native API (pydantic; unknown fields are refused with 422).

The produce and fetch record lists are documented here but parsed and
rendered in bulk by `codec.py` (orjson + Arrow), never one model per record.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lakelog.platform.records import IDEMPOTENCY_BASE

Format = Literal["json", "string", "base64"]
Assignor = Literal["range", "roundrobin", "cooperative-sticky"]
Reset = Literal["earliest", "latest", "none"]
Operation = Literal["read", "write", "describe", "create", "delete", "alter", "all"]

MAX_INT64 = 2**63 - 1


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Request(BaseModel):
    """A request body: unknown fields refused, and no coercion (`true` is not 1, "2" and 2.0 are not 2)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Loose(BaseModel):
    """Kafka-style dotted names (`session.timeout.ms`) as aliases, Python names also accepted; strict types."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)


# ---- topics --------------------------------------------------------------------


class CreateTopic(Request):
    name: str = Field(..., min_length=1, max_length=249, pattern=r"^[a-zA-Z0-9._-]+$")
    partitions: int = Field(1, ge=1, le=10_000)
    config: dict[str, str | int | float | bool] = Field(default_factory=dict)

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"name": "orders", "partitions": 3, "config": {"retention.ms": "604800000"}}]})


class TopicSummary(Strict):
    name: str
    partitions: int


class TopicList(Strict):
    topics: list[TopicSummary]


class PartitionInfo(Strict):
    partition: int
    log_start_offset: int
    log_end_offset: int
    size_bytes: int


class TopicDetail(Strict):
    name: str
    partitions: list[PartitionInfo]
    config: dict[str, Any]


class AlterConfig(Request):
    config: dict[str, str | int | float | bool] = Field(..., min_length=1)

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"config": {"retention.ms": "3600000"}}]})


class AddPartitions(Request):
    partitions: int = Field(..., ge=1, le=10_000, description="The new total number of partitions")


class Deleted(Strict):
    deleted: str


# ---- produce / fetch -------------------------------------------------------------


class Header(Request):
    key: str
    value: str | None = None


class ProduceRecord(Request):
    key: Any = None
    value: Any = None
    headers: list[Header] | None = None
    partition: int | None = Field(None, ge=0, le=2**31 - 1)
    timestamp: int | None = Field(None, ge=0, le=MAX_INT64)


class ProduceRequest(Request):
    records: list[ProduceRecord] = Field(..., min_length=1)
    key_format: Format = "string"
    value_format: Format = "string"
    producer_id: int | None = Field(None, ge=0, le=IDEMPOTENCY_BASE - 1,
                                    description="Ids from 2^62 up stand for Idempotency-Keys")
    producer_epoch: int | None = Field(None, ge=0, le=32767)
    sequence: int | None = Field(None, ge=0, le=2**31 - 1)

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "records": [{"key": "user-1", "value": "hello"}, {"value": "world", "headers": [{"key": "h", "value": "v"}]}],
    }, {"value_format": "json", "records": [{"key": "o-1", "value": {"amount": 12.5}}]}]})


class RecordOffset(Strict):
    partition: int
    offset: int
    timestamp: int


class DeadLetter(Strict):
    index: int = Field(..., description="The record's place in the request")
    topic: str = Field(..., description="The dead-letter topic (errors.deadletterqueue.topic.name)")
    partition: int
    offset: int
    reason: str


class ProduceResponse(Strict):
    offsets: list[RecordOffset] = Field(..., description="One per record, in order; -1 (partition, offset, "
                                                          "timestamp) for a record sent to the dead-letter topic")
    dead_letters: list[DeadLetter] | None = Field(
        None, description="Typed topics: the records that failed validation and went to the dead-letter topic")


class FetchedHeader(Strict):
    key: str
    value: str | None = None
    value_encoding: Literal["base64"] | None = Field(None, description="Set when the value is not UTF-8 text")


class FetchedRecord(Strict):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any = None
    value: Any = None
    headers: list[FetchedHeader] = Field(default_factory=list)
    key_encoding: Literal["base64", "string"] | None = Field(
        None, description="How a key that could not be rendered as asked was written: base64 (not UTF-8), or "
                          "string (format json, but not JSON)")
    value_encoding: Literal["base64", "string"] | None = Field(
        None, description="As key_encoding, for the value")
    value_typed: dict[str, Any] | None = Field(None, description=(
        "Asked with value_typed=true (typed topics): the value's fields decoded with its registered schema, "
        "as the table's `value_typed` column has them; bytes base64, timestamps ISO 8601 UTC, decimals strings; "
        "null when the value does not decode"))


class FetchResponse(Strict):
    records: list[FetchedRecord]
    high_watermark: int | None = None
    last_stable_offset: int | None = Field(None, description="Below it no transaction is open: records are "
                                                             "answered up to it (read committed)")
    log_start_offset: int | None = None
    next_offset: int | None = None
    generation: int | None = None
    poll: int | None = Field(None, description="Group polls: this answer's number, sent back as `after` by the "
                                               "next poll (a lost answer's records then come again)")


class OffsetAnswer(Strict):
    topic: str
    partition: int
    spec: str
    offset: int


# ---- groups -----------------------------------------------------------------------


class JoinGroup(Loose):
    topics: list[str] | None = Field(None, min_length=1)
    pattern: str | None = Field(None, min_length=1, max_length=1000)
    session_timeout_ms: int = Field(45_000, alias="session.timeout.ms", ge=1, le=2**31 - 1)
    max_poll_interval_ms: int = Field(300_000, alias="max.poll.interval.ms", ge=1, le=2**31 - 1)
    auto_offset_reset: Reset = Field("latest", alias="auto.offset.reset")
    enable_auto_commit: bool = Field(True, alias="enable.auto.commit")
    group_instance_id: str | None = Field(None, alias="group.instance.id", min_length=1, max_length=249,
                                          pattern=r"^[a-zA-Z0-9._-]+$")
    assignor: Assignor = "range"

    model_config = ConfigDict(extra="forbid", populate_by_name=True, json_schema_extra={"examples": [{
        "topics": ["orders"], "session.timeout.ms": 10000, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "assignor": "cooperative-sticky"}]})


class Joined(Strict):
    member_id: str
    generation: int


class TopicPartitionModel(Strict):
    topic: str
    partition: int


class HeartbeatResponse(Strict):
    generation: int
    assignment: list[TopicPartitionModel]
    revoke: list[TopicPartitionModel]
    state: str


class OffsetEntry(Request):
    topic: str = Field(..., min_length=1, max_length=249)
    partition: int = Field(..., ge=0, le=2**31 - 1)
    offset: int = Field(..., ge=0, le=MAX_INT64, description="The next offset to read, as in Kafka")
    metadata: str | None = Field(None, max_length=4096)


class CommitOffsets(Request):
    member_id: str | None = Field(None, description="Omit (with generation -1) to commit for a group without members")
    generation: int = Field(-1, ge=-1, le=2**31 - 1)
    offsets: list[OffsetEntry] = Field(..., min_length=1)

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "member_id": "member-0123456789abcdef", "generation": 1,
        "offsets": [{"topic": "orders", "partition": 0, "offset": 42}]}]})


class CommittedEntry(Strict):
    topic: str
    partition: int
    offset: int
    metadata: str | None = None
    lag: int | None = None


class GroupOffsets(Strict):
    group: str
    offsets: list[CommittedEntry]


class ResetOffsets(Request):
    to: Literal["earliest", "latest", "timestamp", "explicit"]
    topics: list[str] | None = Field(None, min_length=1)
    timestamp: int | None = Field(None, ge=0, le=MAX_INT64)
    offsets: list[OffsetEntry] | None = Field(None, min_length=1)

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"to": "earliest", "topics": ["orders"]}, {"to": "timestamp", "timestamp": 1700000000000}]})


class MemberDescription(Strict):
    member_id: str
    group_instance_id: str | None
    assignment: list[TopicPartitionModel]
    revoking: list[TopicPartitionModel]
    topics: list[str]
    pattern: str | None
    last_heartbeat_ms_ago: int


class GroupDescription(Strict):
    group: str
    state: str
    type: str = Field("classic", description="Kafka's group type: \"consumer\" for a group of "
                      "group.protocol=consumer members (KIP-848), else \"classic\" (HTTP groups included)")
    generation: int
    assignor: str | None
    members: list[MemberDescription]
    offsets: list[CommittedEntry]


class GroupSummary(Strict):
    group: str
    state: str
    type: str = Field("classic", description="classic (HTTP members or Kafka's classic protocol) or consumer "
                      "(KIP-848's group.protocol=consumer)")


class GroupList(Strict):
    groups: list[GroupSummary]


# ---- history (what the console plots) -------------------------------------------------------------


class PartitionHistory(Strict):
    partition: int
    log_end_offset: list[int | None] = Field(description="At each of `times_ms` (null: not sampled then)")
    size_bytes: list[int | None] = Field(description="At each of `times_ms` (null: not sampled then)")
    records_per_s: list[float | None] = Field(
        description="Produce rate: the log end offset's change per second since the sample before (null for the "
                    "first sample, or when either is unknown)")


class TopicHistory(Strict):
    topic: str
    interval_ms: int = Field(description="How often the topic's leader samples")
    window_ms: int = Field(description="How long it keeps samples")
    times_ms: list[int] = Field(description="The samples' times (ms since the epoch), oldest first")
    partitions: list[PartitionHistory]

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "topic": "orders", "interval_ms": 5000, "window_ms": 3600000, "times_ms": [1700000000000, 1700000005000],
        "partitions": [{"partition": 0, "log_end_offset": [40, 52], "size_bytes": [8120, 9560],
                        "records_per_s": [None, 2.4]}]}]})


class PartitionLagHistory(Strict):
    topic: str
    partition: int
    lag: list[int | None] = Field(description="At each of `times_ms` (null: no lag known then)")


class GroupHistory(Strict):
    group: str
    interval_ms: int = Field(description="How often the group's coordinator samples")
    window_ms: int = Field(description="How long it keeps samples")
    times_ms: list[int] = Field(description="The samples' times (ms since the epoch), oldest first")
    partitions: list[PartitionLagHistory]


# ---- ACLs ----------------------------------------------------------------------------


class AclModel(Strict):
    principal: str = Field(..., min_length=1, max_length=256)
    resource_type: Literal["topic", "group", "cluster", "subject"]
    pattern_type: Literal["literal", "prefixed"] = "literal"
    resource_name: str = Field(..., min_length=1, max_length=249)
    operation: Operation
    permission: Literal["allow", "deny"] = "allow"


class AclList(Strict):
    acls: list[AclModel]


class AclCreate(Request):
    acls: list[AclModel] = Field(..., min_length=1, max_length=1000)

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"acls": [{
        "principal": "alice", "resource_type": "topic", "pattern_type": "prefixed", "resource_name": "orders",
        "operation": "write", "permission": "allow"}]}]})


class Health(Strict):
    status: str


# ---- cluster and maintenance jobs ---------------------------------------------------------


class ClusterNode(Strict):
    node_id: str
    address: str = Field(description="The URL the other nodes reach it at")
    kafka: str | None = Field(None, description="host:port of its Kafka listener (null when it has none)")


class ReplicaSite(Strict):
    name: str
    control: bool = Field(description="Whether the site holds the catalog and the control tables")
    leads: list[str] = Field(description="The topics whose leader is this site")
    out_of_sync: list[str] = Field(description="The topics it holds a replica of but has fallen out of the "
                                               "in-sync set of")


class ClusterDescription(Strict):
    """The live nodes and who leads what, as this node sees them."""

    node: str | None = Field(description="This node's id (null when it is in no cluster)")
    nodes: list[ClusterNode]
    topics: dict[str, str] = Field(description="Topic -> the id of the node leading it")
    groups: dict[str, str] = Field(description="Group (of those this node knows) -> the id of its coordinator "
                                               "node")
    sites: list[ReplicaSite] = Field(description="The replica sites (empty without LAKELOG_SITES)")

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "node": "127.0.0.1_8081",
        "nodes": [{"node_id": "127.0.0.1_8081", "address": "http://127.0.0.1:8081", "kafka": "127.0.0.1:9081"},
                  {"node_id": "127.0.0.1_8082", "address": "http://127.0.0.1:8082", "kafka": "127.0.0.1:9082"}],
        "topics": {"orders": "127.0.0.1_8082"}, "groups": {"billing": "127.0.0.1_8081"},
        "sites": [{"name": "eu", "control": True, "leads": ["orders"], "out_of_sync": []},
                  {"name": "us", "control": False, "leads": [], "out_of_sync": ["orders"]}]}]})


class JobRunEntry(Strict):
    """One run of a maintenance job, as `<root>/_control/job_runs` holds it."""

    job: str = Field(description="retention, roll, compact, vacuum, journal-sweep or replicate")
    topics: str = Field(description="The topics the run planned work on, comma-separated (empty: none); "
                        "journal-sweep: the journal generations (`_journal/gens/<node>/<run>`)")
    started_ms: int = Field(description="When it started, in milliseconds since the epoch")
    seconds: float = Field(description="How long it took")
    ok: bool = Field(description="False when the run failed (its counts are then zero)")
    commits: int = Field(description="Delta commits made")
    conflicts: int = Field(description="Partitions re-planned because another writer removed an input first")
    files_removed: int = Field(description="Data files removed from the tables")
    files_added: int = Field(description="Data files added (rewrites)")
    bytes_removed: int = Field(description="Bytes of the data files removed")
    records_in: int = Field(description="Records read by rewrites")
    records_out: int = Field(description="Records written by rewrites")
    files_deleted: int = Field(description="Files vacuum (journal objects journal-sweep) deleted from storage")
    trigger: Literal["schedule", "cli", "spark-submit"] = Field(
        description="What started it: the scheduler of `lakelog serve`, `lakelog jobs ...`, or spark-submit")


class JobRuns(Strict):
    """The newest runs first."""

    runs: list[JobRunEntry]

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"runs": [
        {"job": "vacuum", "topics": "orders", "started_ms": 1795300000000, "seconds": 0.41, "ok": True,
         "commits": 0, "conflicts": 0, "files_removed": 0, "files_added": 0, "bytes_removed": 0, "records_in": 0,
         "records_out": 0, "files_deleted": 12, "trigger": "schedule"},
        {"job": "roll", "topics": "orders", "started_ms": 1795299990000, "seconds": 6.2, "ok": True,
         "commits": 3, "conflicts": 0, "files_removed": 42, "files_added": 3, "bytes_removed": 1843200,
         "records_in": 52000, "records_out": 52000, "files_deleted": 0, "trigger": "cli"}]}]})


# ---- errors --------------------------------------------------------------------


class RecordErrorEntry(Strict):
    index: int
    message: str


class ErrorResponse(Strict):
    """Every error answer (4xx, 5xx)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "error_code": "UNKNOWN_TOPIC_OR_PARTITION", "message": "unknown topic 'orders'", "retriable": False}]})

    error_code: str = Field(description="Kafka's error name where one fits, e.g. UNKNOWN_TOPIC_OR_PARTITION")
    message: str = Field(description="What went wrong, for a person")
    retriable: bool = Field(description="Whether the same request may succeed later (503 and 429 answers)")
    log_start_offset: int | None = Field(None, description="OFFSET_OUT_OF_RANGE only: first offset still there")
    log_end_offset: int | None = Field(None, description="OFFSET_OUT_OF_RANGE only: offset the next record gets")
    record_errors: list[RecordErrorEntry] | None = Field(
        None, description="INVALID_RECORD of a typed topic: each refused record's index in the request and why")
