"""Consumer groups: join, heartbeat, poll, commit, leave, describe, reset offsets; the lag history the console
plots."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query
from starlette.responses import Response

from lakelog.ingest_api.auth import Principal, Svc
from lakelog.ingest_api.dependencies import Services, blocking
from lakelog.ingest_api.errors import SchemaViolation
from lakelog.ingest_api.group_paths import group_id
from lakelog.ingest_api.models import (
    CommitOffsets,
    CommittedEntry,
    FetchResponse,
    GroupDescription,
    GroupHistory,
    GroupList,
    GroupOffsets,
    GroupSummary,
    HeartbeatResponse,
    Joined,
    JoinGroup,
    MemberDescription,
    PartitionLagHistory,
    ResetOffsets,
    TopicPartitionModel,
)
from lakelog.ingest_api.routes.records import FormatQ, record_fetch, records_response
from lakelog.ingest_api.routes.topics import SinceMs
from lakelog.platform.groups import CommittedOffset, JoinOptions

router = APIRouter(prefix="/v1/groups", tags=["consumer groups"])


def _group_id(group: Annotated[str, Path(min_length=1, description="Group id, URL-encoded (any characters, "
                                                                    "`/` as `%2F`)")]) -> str:
    return group_id(group)  # kept encoded for routing by GroupPaths (group_paths.py)


GroupId = Annotated[str, Depends(_group_id)]
MemberId = Annotated[str, Path(min_length=1, max_length=300, description="Member id from the join answer")]


def describable(services: Services, principal: str) -> Callable[[str], bool]:
    """Which topics the caller may see in a group's description: the others are left out."""
    return lambda topic: services.authorizer.allowed(principal, "describe", "topic", topic)


def tps(pairs: list[tuple[str, int]]) -> list[TopicPartitionModel]:
    return [TopicPartitionModel(topic=t, partition=p) for t, p in pairs]


def entries(offsets: dict[tuple[str, int], CommittedOffset], lag: dict[tuple[str, int], int],
            visible: Callable[[str], bool] | None = None) -> list[CommittedEntry]:
    return [CommittedEntry(topic=t, partition=p, offset=c.offset, metadata=c.metadata, lag=lag.get((t, p)))
            for (t, p), c in sorted(offsets.items()) if visible is None or visible(t)]


@router.get("", response_model=GroupList, summary="List groups (those the caller may describe)")
async def list_groups(services: Svc, principal: Principal) -> GroupList:
    allowed = services.authorizer.allowed
    kinds = services.coordinator.group_types()
    return GroupList(groups=[GroupSummary(group=g, state=s, type=kinds.get(g, "classic"))
                             for g, s in services.coordinator.list_groups()
                             if allowed(principal, "describe", "group", g)])


@router.post("/{group}/members", response_model=Joined, status_code=201,
             summary="Join a group; answers the member id and the generation")
async def join(group: GroupId, body: JoinGroup, services: Svc, principal: Principal) -> Joined:
    authorizer = services.authorizer
    authorizer.check(principal, "read", "group", group)
    for topic in body.topics or []:
        authorizer.check(principal, "read", "topic", topic)
        await blocking(services.broker.topic, topic)  # unknown topic: 404, nothing joined
    options = JoinOptions(
        topics=tuple(body.topics or ()), pattern=body.pattern, session_timeout_ms=body.session_timeout_ms,
        max_poll_interval_ms=body.max_poll_interval_ms, auto_offset_reset=body.auto_offset_reset,
        enable_auto_commit=body.enable_auto_commit, group_instance_id=body.group_instance_id, assignor=body.assignor,
        can_read=None if not authorizer.enabled else (lambda t: authorizer.allowed(principal, "read", "topic", t)),
    )
    member_id, generation = await blocking(services.coordinator.join, group, options)
    return Joined(member_id=member_id, generation=generation)


@router.post("/{group}/members/{member}/heartbeat", response_model=HeartbeatResponse,
             summary="Keep the member alive; answers the generation, the assignment and partitions to revoke")
async def heartbeat(group: GroupId, member: MemberId, services: Svc, principal: Principal) -> HeartbeatResponse:
    services.authorizer.check(principal, "read", "group", group)
    beat = services.coordinator.heartbeat(group, member)
    return HeartbeatResponse(generation=beat.generation, assignment=tps(beat.assignment), revoke=tps(beat.revoke),
                             state=beat.state)


@router.get("/{group}/members/{member}/records", response_model=FetchResponse,
            summary="Poll the member's partitions fairly (long poll with timeout_ms)",
            responses={200: {"content": {"application/vnd.apache.arrow.stream": {}}}})
async def poll(
    group: GroupId,
    member: MemberId,
    services: Svc,
    principal: Principal,
    max_records: Annotated[int, Query(ge=1, le=100_000)] = 500,
    max_bytes: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    timeout_ms: Annotated[int, Query(ge=0, le=300_000)] = 0,
    after: Annotated[int | None, Query(ge=0, description="The `poll` number of the last answer received: "
                                                         "a lost answer's records come again")] = None,
    request: Annotated[int | None, Query(ge=1, description="This poll request's number, higher for each request "
                                                           "the member sends: a stale request changes nothing")] = None,
    key_format: FormatQ = "string",
    value_format: FormatQ = "string",
    format: Literal["json", "arrow"] = "json",
) -> Response:
    started = time.perf_counter()
    authorizer = services.authorizer
    authorizer.check(principal, "read", "group", group)
    wait = min(timeout_ms, services.settings.max_poll_timeout_ms)
    result = await blocking(services.coordinator.poll, group, member, max_records, max_bytes, wait,
                            lambda topic: authorizer.check(principal, "read", "topic", topic), after, request)
    record_fetch(services, result.results, "poll", started)
    return records_response(result.results, key_format, value_format, format,
                            {"generation": result.generation, "poll": result.number})


@router.delete("/{group}/members/{member}", status_code=204, summary="Leave the group")
async def leave(group: GroupId, member: MemberId, services: Svc, principal: Principal) -> Response:
    services.authorizer.check(principal, "read", "group", group)
    await blocking(services.coordinator.leave, group, member)  # reads the catalog: off the event loop
    return Response(status_code=204)


@router.delete("/{group}", status_code=204,
               summary="Delete an empty group: its committed offsets are removed (Kafka's DeleteGroups)")
async def delete_group(group: GroupId, services: Svc, principal: Principal) -> Response:
    services.authorizer.check(principal, "delete", "group", group)
    await blocking(services.coordinator.delete_group, group)  # writes the offsets table: off the event loop
    return Response(status_code=204)


@router.post("/{group}/offsets", response_model=GroupOffsets,
             summary="Commit offsets (the next offset to read); answered once durable")
async def commit(group: GroupId, body: CommitOffsets, services: Svc, principal: Principal) -> GroupOffsets:
    services.authorizer.check(principal, "read", "group", group)
    for topic in sorted({o.topic for o in body.offsets}):
        services.authorizer.check(principal, "read", "topic", topic)
    offsets = [(o.topic, o.partition, o.offset, o.metadata) for o in body.offsets]
    future = await blocking(services.coordinator.commit, group, body.member_id, body.generation, offsets)
    await await_durable(services, future)
    committed = services.coordinator.committed(group)
    wanted = {(o.topic, o.partition) for o in body.offsets}
    return GroupOffsets(group=group, offsets=entries({k: v for k, v in committed.items() if k in wanted}, {}))


async def await_durable(services: Services, future: Future[Any]) -> None:
    await asyncio.shield(asyncio.wrap_future(future))


@router.get("/{group}/offsets", response_model=GroupOffsets, summary="Committed offsets and lag")
async def committed_offsets(group: GroupId, services: Svc, principal: Principal) -> GroupOffsets:
    services.authorizer.check(principal, "describe", "group", group)
    view = await blocking(services.coordinator.describe, group)
    visible = describable(services, principal)
    return GroupOffsets(group=group, offsets=entries(view.offsets, view.lag, visible))


@router.get("/{group}", response_model=GroupDescription, summary="Members, assignment, state, offsets and lag")
async def describe_group(group: GroupId, services: Svc, principal: Principal) -> GroupDescription:
    services.authorizer.check(principal, "describe", "group", group)
    view = await blocking(services.coordinator.describe, group)
    visible = describable(services, principal)
    return GroupDescription(
        group=view.group, state=view.state, type=view.group_type, generation=view.generation,
        assignor=view.assignor,
        members=[MemberDescription(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                   assignment=tps([tp for tp in m.assignment if visible(tp[0])]),
                                   revoking=tps([tp for tp in m.revoking if visible(tp[0])]),
                                   topics=[t for t in m.subscription if visible(t)],
                                   pattern=m.pattern, last_heartbeat_ms_ago=m.last_heartbeat_ms_ago)
                 for m in view.members],
        offsets=entries(view.offsets, view.lag, visible),
    )


@router.get("/{group}/history", response_model=GroupHistory,
            summary="The last hour of lag per partition (sampled by the group's coordinator)")
async def group_history(group: GroupId, services: Svc, principal: Principal, since_ms: SinceMs = None) -> GroupHistory:
    services.authorizer.check(principal, "describe", "group", group)
    services.coordinator.committed(group)  # an unknown group is a 404, as when describing it (memory only)
    visible = describable(services, principal)
    history = services.history
    series = history.group(group, since_ms)
    return GroupHistory(
        group=group, interval_ms=history.interval_ms, window_ms=history.window_ms, times_ms=series.times_ms,
        partitions=[PartitionLagHistory(topic=s.topic, partition=s.partition, lag=s.lag)
                    for s in series.partitions if visible(s.topic)])


@router.post("/{group}/offsets/reset", response_model=GroupOffsets,
             summary="Reset an empty group's offsets: earliest, latest, timestamp or explicit")
async def reset_offsets(group: GroupId, body: ResetOffsets, services: Svc, principal: Principal) -> GroupOffsets:
    services.authorizer.check(principal, "read", "group", group)
    topics = body.topics or [o.topic for o in body.offsets or []]
    for topic in sorted(set(topics)):
        services.authorizer.check(principal, "read", "topic", topic)
    explicit = None
    spec: str | int | None = body.to
    if body.to == "explicit":
        if not body.offsets:
            raise SchemaViolation("to=explicit needs 'offsets'")
        explicit = [(o.topic, o.partition, o.offset) for o in body.offsets]
    elif body.to == "timestamp":
        if body.timestamp is None:
            raise SchemaViolation("to=timestamp needs 'timestamp' (ms)")
        spec = body.timestamp
    future = await blocking(services.coordinator.reset_offsets, group, spec, body.topics, explicit,
                            lambda topic: services.authorizer.check(principal, "read", "topic", topic))
    await await_durable(services, future)
    view = await blocking(services.coordinator.describe, group)
    visible = describable(services, principal)
    return GroupOffsets(group=group, offsets=entries(view.offsets, view.lag, visible))
