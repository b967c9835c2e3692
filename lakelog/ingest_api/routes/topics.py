"""Topic admin: list, create, describe, alter config, add partitions, delete; the history the console plots."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from lakelog.ingest_api.auth import Principal, Svc
from lakelog.ingest_api.dependencies import Services, blocking
from lakelog.ingest_api.models import (
    MAX_INT64,
    AddPartitions,
    AlterConfig,
    CreateTopic,
    Deleted,
    PartitionHistory,
    PartitionInfo,
    TopicDetail,
    TopicHistory,
    TopicList,
    TopicSummary,
)
from lakelog.platform.broker.ends import TopicDescription

router = APIRouter(prefix="/v1/topics", tags=["topics"])
TopicName = Annotated[str, Path(min_length=1, max_length=249, description="Topic name")]
SinceMs = Annotated[int | None, Query(ge=0, le=MAX_INT64, description="Only samples after this time (ms since the "
                                                                       "epoch): what is new since the last one seen")]


async def detail(services: Services, topic: str) -> TopicDetail:
    return _detail(await blocking(services.broker.describe_topic, topic))


def _detail(description: TopicDescription) -> TopicDetail:
    return TopicDetail(
        name=description.meta.name,
        partitions=[PartitionInfo(partition=p.partition, log_start_offset=p.log_start_offset,
                                  log_end_offset=p.log_end_offset, size_bytes=p.size_bytes)
                    for p in description.partitions],
        config=description.meta.config.to_kafka(),
    )


@router.get("", response_model=TopicList, summary="List topics (those the caller may describe)")
async def list_topics(services: Svc, principal: Principal) -> TopicList:
    topics = await blocking(services.broker.list_topics)
    allowed = services.authorizer.allowed
    return TopicList(topics=[TopicSummary(name=t.name, partitions=t.partitions) for t in topics
                             if allowed(principal, "describe", "topic", t.name)])


@router.post("", response_model=TopicDetail, status_code=201, summary="Create a topic (no auto-creation)")
async def create_topic(body: CreateTopic, services: Svc, principal: Principal) -> TopicDetail:
    services.authorizer.check(principal, "create", "topic", body.name)
    meta = await blocking(services.broker.create_topic, body.name, body.partitions, body.config)
    return _detail(TopicDescription.created(meta))


@router.get("/{topic}", response_model=TopicDetail,
            summary="Describe a topic: config, per-partition log start and end offsets, sizes")
async def describe_topic(topic: TopicName, services: Svc, principal: Principal) -> TopicDetail:
    services.authorizer.check(principal, "describe", "topic", topic)
    return await detail(services, topic)


@router.get("/{topic}/history", response_model=TopicHistory,
            summary="The last hour of each partition's log end offset, size and produce rate (sampled by the "
                    "topic's leader)")
async def topic_history(topic: TopicName, services: Svc, principal: Principal,
                        since_ms: SinceMs = None) -> TopicHistory:
    services.authorizer.check(principal, "describe", "topic", topic)
    await blocking(services.broker.catalog.get, topic)  # an unknown topic is a 404, as when describing it
    history = services.history
    series = history.topic(topic, since_ms)
    return TopicHistory(
        topic=topic, interval_ms=history.interval_ms, window_ms=history.window_ms, times_ms=series.times_ms,
        partitions=[PartitionHistory(partition=p.partition, log_end_offset=p.log_end_offset, size_bytes=p.size_bytes,
                                     records_per_s=p.records_per_s) for p in series.partitions])


@router.patch("/{topic}/config", response_model=TopicDetail, summary="Change topic config keys (Kafka names)")
async def alter_config(topic: TopicName, body: AlterConfig, services: Svc, principal: Principal) -> TopicDetail:
    services.authorizer.check(principal, "alter", "topic", topic)
    await blocking(services.broker.alter_topic_config, topic, body.config)
    return await detail(services, topic)


@router.post("/{topic}/partitions", response_model=TopicDetail, summary="Increase the number of partitions")
async def add_partitions(topic: TopicName, body: AddPartitions, services: Svc, principal: Principal) -> TopicDetail:
    services.authorizer.check(principal, "alter", "topic", topic)
    await blocking(services.broker.add_partitions, topic, body.partitions)
    return await detail(services, topic)


@router.delete("/{topic}", response_model=Deleted, summary="Delete a topic and its data")
async def delete_topic(topic: TopicName, services: Svc, principal: Principal) -> Deleted:
    services.authorizer.check(principal, "delete", "topic", topic)
    await blocking(services.broker.delete_topic, topic)
    services.open_topics.discard(topic)  # its table is closed: a later produce opens a new topic's afresh
    services.metrics.topics_seen.discard(topic)
    return Deleted(deleted=topic)
