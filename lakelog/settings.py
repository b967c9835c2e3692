"""Node settings, in one place: flags, `LAKELOG_*` environment variables and defaults.

Grouped by concern: `CoreSettings` (what the log core reads), `HttpSettings`, `GroupSettings`,
`ClusterSettings`, `KafkaSettings` and `JobSettings`. `Settings` is all of them under flat
`LAKELOG_<NAME>` environment variables; the core is handed `settings.core` and never sees the others.

Topic settings (`retention.ms`, `max.message.bytes`, ...) are not here: they
live with each topic in the catalog (`platform/catalog/topic_config.py`).
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class CoreSettings(BaseModel):
    """What the log core reads: the root, group commit, deadlines, caches, replication sites."""

    root: str = Field("./data", description="Root URI: a local folder or s3://bucket/prefix")
    storage: dict[str, str] = Field(
        default_factory=dict,
        description="Storage options (delta-rs names: aws_endpoint_url, aws_region, aws_allow_http, "
                    "conditional_put, ...)",
    )
    linger_ms: int = Field(0, ge=0, description="linger.ms: how long a node journal flush waits for more calls "
                           "after the first (0: a group commit, written at once when no put is out, calls "
                           "gathered while one is)")
    batch_bytes: int = Field(8 * 1024 * 1024, ge=1,
                             description="batch.bytes: a flush starts once this much is buffered")
    request_timeout_ms: int = Field(30_000, ge=1, description="Default produce deadline (timeout_ms)")
    tail_cache_bytes: int = Field(64 * 1024 * 1024, ge=0, description="Memory for recently written records")
    refresh_interval_ms: int = Field(100, ge=1, description="How often a long poll looks for other writers' commits")
    # Replication across storage sites (empty: one site, `root`)
    sites: dict[str, str] = Field(default_factory=dict, description="Site name -> root URI")
    site_storage: dict[str, dict[str, str]] = Field(default_factory=dict, description="Per-site storage options")
    control_site: str | None = Field(None, description="Site holding the catalog and control tables (default: first)")
    site: str | None = Field(None, description="This node's nearest site, preferred for fetches")
    replica_lag_time_max_ms: int = Field(30_000, ge=1, description="replica.lag.time.max.ms")
    replication_interval_ms: int = Field(1_000, ge=0, description="Follower catch-up interval (0 = off)")
    # The node journal (docs/architecture.md, "The node journal"): every produce is acknowledged on it.
    journal_table_commit_rate: float = Field(5.5, ge=0, description="Table commits a second this node starts "
                                             "for topics due by table.commit.interval.ms (0: no limit); bounds "
                                             "object requests however many topics (journal/pacing.py)")
    journal_put_rate: float = Field(13.0, ge=0, description="Journal puts a second this node makes at most on "
                                    "object storage (a token bucket: an idle node puts at once, a busy one gathers "
                                    "calls while it refills; a flush of batch.bytes goes at once; 0: no limit). A "
                                    "local folder's puts are not paced (journal/pacing.py)")
    journal_node: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]+$", description="This node's journal "
                                     "folder (_journal/gens/<node>); processes sharing a root need distinct "
                                     "ones (default: `lakelog serve`'s node id; an embedded broker's `node`)")


class HttpSettings(BaseModel):
    """The HTTP tier: where it listens, who may call, how much it takes at once."""

    host: str = "127.0.0.1"
    port: int = 8080
    insecure: bool = False
    api_keys_json: str | None = Field(None, description="JSON object: API key -> principal; enables authentication")
    admin_principals: list[str] = Field(default_factory=lambda: ["admin"])
    docs_require_key: bool = Field(False, description="With authentication on, /docs, /redoc and /openapi.json "
                                                       "need an API key too")
    max_request_bytes: int = Field(64 * 1024 * 1024, ge=1, description="Largest request body the HTTP tier accepts")
    max_inflight_produce_bytes: int = Field(
        256 * 1024 * 1024, ge=1, description="Produce bytes the HTTP tier holds at once; beyond it 429 (back-pressure)")
    max_poll_timeout_ms: int = Field(30_000, ge=0, description="Longest long poll (timeout_ms) a fetch may ask for")
    shutdown_timeout_s: int = Field(30, ge=1, description="Graceful shutdown: how long in-flight requests may finish")
    access_log: bool = Field(False, description="Log one line per request (method, path, status)")
    # The history the console plots (`GET /v1/topics/{topic}/history`, `GET /v1/groups/{group}/history`)
    history_interval_s: float = Field(5.0, gt=0, le=3600, description="How often the history of the topics "
                                                                      "this node leads and the groups it "
                                                                      "coordinates is sampled")
    history_window_s: int = Field(3600, ge=1, le=86_400, description="How long the history keeps samples "
                                                                     "(in memory)")


class GroupSettings(BaseModel):
    """The consumer-group coordinator, with Kafka's names."""

    group_initial_rebalance_delay_ms: int = Field(
        3000, ge=0,
        description="group.initial.rebalance.delay.ms: how long a new group fills before its first assignment")
    group_min_session_timeout_ms: int = Field(1000, ge=1, description="group.min.session.timeout.ms")
    group_max_session_timeout_ms: int = Field(1_800_000, ge=1, description="group.max.session.timeout.ms")
    offsets_commit_linger_ms: int = Field(2, ge=0, description="How long the offsets writer waits to batch commits")
    # KIP-848's consumer groups (group.protocol=consumer): the coordinator sets both for its members
    group_consumer_session_timeout_ms: int = Field(
        45_000, ge=1, description="group.consumer.session.timeout.ms: a consumer-protocol member silent this long "
        "is removed")
    group_consumer_heartbeat_interval_ms: int = Field(
        5_000, ge=1, description="group.consumer.heartbeat.interval.ms: how often consumer-protocol members heartbeat")
    # KIP-932's share groups: the broker-level defaults; each group may override the record ones (share.*
    # group configs, IncrementalAlterConfigs on its GROUP resource)
    group_share_session_timeout_ms: int = Field(
        45_000, ge=1, description="group.share.session.timeout.ms: a share-group member silent this long is removed")
    group_share_heartbeat_interval_ms: int = Field(
        5_000, ge=1, description="group.share.heartbeat.interval.ms: how often share-group members heartbeat")
    group_share_record_lock_duration_ms: int = Field(
        30_000, ge=1, description="group.share.record.lock.duration.ms: how long a delivered record stays locked "
        "to its consumer")
    group_share_delivery_count_limit: int = Field(
        5, ge=2, le=10, description="group.share.delivery.count.limit: deliveries before a record is archived")
    group_share_partition_max_record_locks: int = Field(
        2_000, ge=100, description="group.share.partition.max.record.locks: records in flight per share-partition")


class ClusterSettings(BaseModel):
    """Many `lakelog serve` nodes on one root: liveness through the root, node-to-node calls."""

    node_id: str | None = Field(None, description="This node's id in the cluster (default: from its address)")
    advertise: str | None = Field(None, description="URL other nodes reach this node at (default: its own "
                                                    "http://host:port)")
    cluster_secret: str | None = Field(None, description="Shared secret of node-to-node requests (needed unless "
                                                         "every node binds loopback)")
    broker_heartbeat_interval_ms: int = Field(2_000, ge=10, description="broker.heartbeat.interval.ms: how often a "
                                                                         "node renews its heartbeat object")
    broker_session_timeout_ms: int = Field(9_000, ge=50, description="broker.session.timeout.ms: a node that has "
                                                                      "not renewed for this long is out")


class KafkaSettings(BaseModel):
    """The Kafka listener beside HTTP: where it listens and what it tells clients."""

    kafka_port: int = Field(9092, ge=-1, le=65535, description="Kafka listener port (0: any free port, -1: off)")
    kafka_host: str | None = Field(None, description="Kafka listener address (default: the HTTP host)")
    kafka_advertise: str | None = Field(None, description="host:port Kafka clients reach this node at "
                                                          "(default: the listener's own)")
    kafka_cluster_id: str = Field("lakelog", description="The cluster id Kafka clients are told")
    kafka_tls_cert_file: str | None = Field(None, description="PEM certificate (chain): TLS on the Kafka listener")
    kafka_tls_key_file: str | None = Field(None, description="PEM private key of the certificate")
    # Topics created on first use, with Kafka's names and defaults (platform/broker/auto_create.py)
    auto_create_topics_enable: bool = Field(True, description="auto.create.topics.enable: a Metadata request "
                                            "that allows it, or an HTTP produce, creates a missing topic")
    num_partitions: int = Field(1, ge=1, le=10_000, description="num.partitions: partitions of a topic created "
                                "on first use, or by CreateTopics with num_partitions -1")
    default_replication_factor: int = Field(1, ge=1, le=32767, description="default.replication.factor: "
                                            "replication.factor of such a topic (with replica sites only)")


class JobSettings(BaseModel):
    """The maintenance jobs: their schedule in `lakelog serve`, the record of their runs."""

    jobs_interval_s: int = Field(300, ge=0, description="Seconds between rounds of the jobs (0 = off)")
    job_runs_retention_ms: int = Field(
        7 * 24 * 3600 * 1000, ge=-1, description="How long the record of job runs (`_control/job_runs`, "
                                                 "GET /v1/jobs) keeps a run (-1: forever)")
    spark_log_file: str = Field(
        default_factory=lambda: os.path.join(tempfile.gettempdir(), "lakelog-spark.log"),
        description="Where local Spark's own log (WARN and above) goes, out of the server's log")


class Settings(BaseSettings, CoreSettings, HttpSettings, GroupSettings, ClusterSettings, KafkaSettings,
               JobSettings):
    model_config = SettingsConfigDict(env_prefix="LAKELOG_", env_nested_delimiter="__", extra="ignore")

    @property
    def core(self) -> CoreSettings:
        return CoreSettings.model_validate(self.model_dump(include=set(CoreSettings.model_fields)))

    @field_validator("api_keys_json")
    @classmethod
    def _api_keys_shape(cls, value: str | None) -> str | None:
        if value is not None:
            _parse_api_keys(value)
        return value

    @property
    def api_keys(self) -> dict[str, str]:
        """API key -> principal; empty means authentication is off (`{}` included)."""
        return _parse_api_keys(self.api_keys_json) if self.api_keys_json else {}

    @property
    def authentication(self) -> bool:
        return bool(self.api_keys)


def own_journal(settings: Settings, kind: str) -> Settings:
    """Settings for a process that is no serving node (a maintenance job, the Spark sink): a journal folder
    of its own, `<kind>-<random>`. Under a node's folder name its start would fence that node's live
    generation; an unused generation leaves nothing behind at a clean stop."""
    return settings.model_copy(update={"journal_node": f"{kind}-{uuid.uuid4().hex[:12]}"})


def _parse_api_keys(text: str) -> dict[str, str]:
    try:
        keys = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"api_keys_json is not JSON: {exc}") from None
    if not isinstance(keys, dict) or not all(isinstance(k, str) and k and isinstance(v, str) and v
                                             for k, v in keys.items()):
        raise ValueError("api_keys_json must be a JSON object of API key -> principal (non-empty strings)")
    return keys
