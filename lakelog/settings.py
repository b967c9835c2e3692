"""Node settings, in one place: flags, `LAKELOG_*` environment variables and defaults.

Topic settings (`retention.ms`, `max.message.bytes`, ...) are not here: they
live with each topic in the catalog (`platform/topic_config.py`).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LAKELOG_", env_nested_delimiter="__", extra="ignore")

    root: str = Field("./data", description="Root URI: a local folder or s3://bucket/prefix")
    storage: dict[str, str] = Field(
        default_factory=dict,
        description="Storage options (delta-rs names: aws_endpoint_url, aws_region, aws_allow_http, conditional_put, ...)",
    )
    linger_ms: int = Field(5, ge=0, description="linger.ms: how long a flush waits for more records")
    batch_bytes: int = Field(8 * 1024 * 1024, ge=1, description="batch.bytes: a flush starts once this much is buffered")
    request_timeout_ms: int = Field(30_000, ge=1, description="Default produce deadline (timeout_ms)")
    tail_cache_bytes: int = Field(64 * 1024 * 1024, ge=0, description="Memory for recently written records")
    max_request_bytes: int = Field(64 * 1024 * 1024, ge=1, description="Largest request body the HTTP tier accepts")
    refresh_interval_ms: int = Field(100, ge=1, description="How often a long poll looks for other writers' commits")
    # HTTP tier
    host: str = "127.0.0.1"
    port: int = 8080
    insecure: bool = False
    api_keys_json: str | None = Field(None, description="JSON object: API key -> principal; enables authentication")
    admin_principals: list[str] = Field(default_factory=lambda: ["admin"])
    max_inflight_produce_bytes: int = Field(
        256 * 1024 * 1024, ge=1, description="Produce bytes the HTTP tier holds at once; beyond it 429 (back-pressure)")
    max_poll_timeout_ms: int = Field(30_000, ge=0, description="Longest long poll (timeout_ms) a fetch may ask for")
    shutdown_timeout_s: int = Field(30, ge=1, description="Graceful shutdown: how long in-flight requests may finish")
    # Consumer groups
    group_initial_rebalance_delay_ms: int = Field(
        3000, ge=0, description="group.initial.rebalance.delay.ms: how long a new group fills before its first assignment")
    group_min_session_timeout_ms: int = Field(1000, ge=1, description="group.min.session.timeout.ms")
    group_max_session_timeout_ms: int = Field(1_800_000, ge=1, description="group.max.session.timeout.ms")
    offsets_commit_linger_ms: int = Field(2, ge=0, description="How long the offsets writer waits to batch commits")
    # Spark jobs schedule in `lakelog serve` (seconds; 0 = off)
    jobs_interval_s: int = Field(300, ge=0)
    # Replication across storage sites (empty: one site, `root`)
    sites: dict[str, str] = Field(default_factory=dict, description="Site name -> root URI")
    site_storage: dict[str, dict[str, str]] = Field(default_factory=dict, description="Per-site storage options")
    control_site: str | None = Field(None, description="Site holding the catalog and control tables (default: first)")
    site: str | None = Field(None, description="This node's nearest site, preferred for fetches")
    replica_lag_time_max_ms: int = Field(30_000, ge=1, description="replica.lag.time.max.ms")
    replication_interval_ms: int = Field(1_000, ge=0, description="Follower catch-up interval (0 = off)")
