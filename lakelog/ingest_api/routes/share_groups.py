"""Share groups (KIP-932, queues) over HTTP: join, heartbeat, poll with acknowledgements, acknowledge, leave;
list, describe (members, and each share-partition's in-flight records with their delivery counts), configs,
delete. The node's share coordinator (`platform/share/coordinator.py`) holds the logic; these routes only
translate. Records are rendered by the same encoder as every fetch (`codec.render_records`), each with its
`delivery_count`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Request
from starlette.responses import Response

from lakelog.ingest_api import codec
from lakelog.ingest_api.auth import Principal, Svc
from lakelog.ingest_api.dependencies import Services, blocking
from lakelog.ingest_api.errors import SchemaViolation
from lakelog.ingest_api.group_paths import group_id
from lakelog.ingest_api.models import TopicPartitionModel
from lakelog.ingest_api.routes.records import json_response, record_fetch
from lakelog.ingest_api.share_models import (
    FailedAck,
    InFlightRecord,
    ShareAck,
    ShareAckResponse,
    ShareAcks,
    ShareConfig,
    ShareConfigChange,
    ShareGroupDescription,
    ShareGroupList,
    ShareGroupSummary,
    ShareHeartbeat,
    ShareJoin,
    ShareMemberDescription,
    ShareMembership,
    SharePartitionDescription,
    SharePoll,
    SharePollResponse,
)
from lakelog.platform.errors import LakelogError
from lakelog.platform.records import FetchResult, TopicPartition
from lakelog.platform.share import Ack, AckType, HeartbeatAnswer, ShareCoordinator
from lakelog.platform.share import config as share_config
from lakelog.platform.share.errors import FencedMemberEpoch
from lakelog.platform.share.partition import RecordState

router = APIRouter(prefix="/v1/share-groups", tags=["share groups"])
FENCED_RETRIES = 3
ACK_TYPES = {"accept": AckType.ACCEPT, "release": AckType.RELEASE, "reject": AckType.REJECT}
STATES: dict[RecordState, Literal["available", "acquired", "acknowledged", "archived"]] = {
    RecordState.AVAILABLE: "available", RecordState.ACQUIRED: "acquired", RecordState.ACKNOWLEDGED: "acknowledged",
    RecordState.ARCHIVED: "archived"}


def _group_id(group: Annotated[str, Path(min_length=1, description="Share group id, URL-encoded (any "
                                                                    "characters, `/` as `%2F`)")]) -> str:
    return group_id(group)  # kept encoded for routing by GroupPaths (group_paths.py)


GroupId = Annotated[str, Depends(_group_id)]
MemberId = Annotated[str, Path(min_length=1, max_length=300, description="Member id from the join answer")]


def ack_batches(acks: Iterable[ShareAck]) -> list[Ack]:
    """The acknowledgements as the coordinator takes them: per partition, each run of consecutive offsets with
    the same type as one range. An offset acknowledged twice with different types is refused."""
    kinds: dict[TopicPartition, dict[int, int]] = {}
    for ack in acks:
        if (ack.offset is None) == (ack.offsets is None):
            raise SchemaViolation(f"acknowledgement of {ack.topic}-{ack.partition}: give offset or offsets")
        offsets = [ack.offset] if ack.offset is not None else ack.offsets or []
        kind = int(ACK_TYPES[ack.type])
        seen = kinds.setdefault((ack.topic, ack.partition), {})
        for offset in offsets:
            if seen.setdefault(offset, kind) != kind:
                raise SchemaViolation(f"offset {offset} of {ack.topic}-{ack.partition} is acknowledged twice with "
                                      "different types")
    batches: list[Ack] = []
    for (topic, partition), by_offset in sorted(kinds.items()):
        run: list[int] = []
        for offset in sorted(by_offset):
            if run and (offset != run[-1] + 1 or by_offset[offset] != by_offset[run[0]]):
                batches.append(Ack(topic, partition, run[0], run[-1], (by_offset[run[0]],)))
                run = []
            run.append(offset)
        if run:
            batches.append(Ack(topic, partition, run[0], run[-1], (by_offset[run[0]],)))
    return batches


def failed(errors: dict[TopicPartition, LakelogError]) -> list[FailedAck]:
    return [FailedAck(topic=t, partition=p, error_code=e.code, message=e.message)
            for (t, p), e in sorted(errors.items())]


def tps(pairs: Iterable[TopicPartition]) -> list[TopicPartitionModel]:
    return [TopicPartitionModel(topic=t, partition=p) for t, p in sorted(pairs)]


async def coordinator(services: Services) -> ShareCoordinator:
    """The node's share coordinator: started on first use, reading its state from the root (off the loop)."""
    return await blocking(services.shares)


def _check_topics(services: Services, principal: str, topics: Sequence[str]) -> None:
    for topic in topics:
        services.authorizer.check(principal, "read", "topic", topic)
        services.broker.topic(topic)  # unknown topic: 404, nothing joined


def _membership(services: Services, shares: ShareCoordinator, group: str, member_id: str,
                epoch: int) -> ShareMembership:
    member = shares.group(group).members.get(member_id)
    return ShareMembership(member_id=member_id, epoch=epoch, assignment=tps(member.assignment if member else ()),
                           heartbeat_interval_ms=services.settings.group_share_heartbeat_interval_ms)


@router.get("", response_model=ShareGroupList, summary="List share groups (those the caller may describe)")
async def list_share_groups(services: Svc, principal: Principal) -> ShareGroupList:
    shares = await coordinator(services)
    allowed = services.authorizer.allowed
    summaries = []
    for group_name in shares.group_ids():
        if not allowed(principal, "describe", "group", group_name):
            continue
        group = shares.group(group_name)
        summaries.append(ShareGroupSummary(group=group_name, state=group.state, members=len(group.members)))
    return ShareGroupList(groups=summaries)


@router.post("/{group}/members", response_model=ShareMembership, status_code=201,
             summary="Join a share group; answers the member id, its epoch and assignment")
async def join(group: GroupId, body: ShareJoin, services: Svc, principal: Principal,
               request: Request) -> ShareMembership:
    services.authorizer.check(principal, "read", "group", group)
    await blocking(_check_topics, services, principal, body.topics)
    shares = await coordinator(services)
    host = request.client.host if request.client else ""
    answer = await blocking(shares.heartbeat, group, str(uuid.uuid4()), 0, body.topics, (body.client_id, host))
    return _membership(services, shares, group, answer.member_id, answer.epoch)


@router.post("/{group}/members/{member}/heartbeat", response_model=ShareMembership,
             summary="Keep the member alive (and change its topics); answers its epoch and assignment")
async def heartbeat(group: GroupId, member: MemberId, services: Svc, principal: Principal,
                    body: ShareHeartbeat | None = None) -> ShareMembership:
    services.authorizer.check(principal, "read", "group", group)
    body = body or ShareHeartbeat()
    if body.topics:
        await blocking(_check_topics, services, principal, body.topics)
    shares = await coordinator(services)
    answer = await blocking(_beat, shares, group, member, body.epoch, body.topics)
    return _membership(services, shares, group, answer.member_id, answer.epoch)


def _beat(shares: ShareCoordinator, group: str, member: str, epoch: int | None,
          topics: list[str] | None) -> HeartbeatAnswer:
    """A heartbeat at `epoch`, or (None) at the member's current epoch: read, then sent, so a join of another
    member in between (it moves every member's epoch) is not taken for a stale member."""
    for attempt in range(FENCED_RETRIES):
        current = epoch
        if current is None:
            known = shares.group(group).members.get(member)
            current = known.epoch if known is not None else 1  # an unknown member: UNKNOWN_MEMBER_ID
        try:
            return shares.heartbeat(group, member, current, topics)
        except FencedMemberEpoch:
            if epoch is not None or attempt == FENCED_RETRIES - 1:
                raise
    raise AssertionError("unreachable: the last attempt answers or raises")


@router.delete("/{group}/members/{member}", status_code=204,
               summary="Leave the share group: the records the member holds go back to the group")
async def leave(group: GroupId, member: MemberId, services: Svc, principal: Principal) -> Response:
    services.authorizer.check(principal, "read", "group", group)
    await blocking((await coordinator(services)).heartbeat, group, member, -1, None)
    return Response(status_code=204)


@router.post("/{group}/members/{member}/poll", response_model=SharePollResponse,
             summary="Acknowledge, then receive records of the member's partitions (long poll with timeout_ms)")
async def poll(group: GroupId, member: MemberId, body: SharePoll, services: Svc, principal: Principal) -> Response:
    started = time.perf_counter()
    services.authorizer.check(principal, "read", "group", group)
    shares = await coordinator(services)
    acks = ack_batches(body.acks)
    known = shares.group(group).members.get(member)
    partitions = sorted(known.assignment) if known is not None else []
    for topic in sorted({t for t, _ in partitions} | {a.topic for a in acks}):
        services.authorizer.check(principal, "read", "topic", topic)
    wait = min(body.timeout_ms, services.settings.max_poll_timeout_ms)
    failed_acks, deliveries = await blocking(shares.fetch, group, member, partitions, acks, body.max_records, wait,
                                             body.max_bytes)
    results = [FetchResult(t, p, d.records, -1, -1) for (t, p), d in sorted(deliveries.items())
               if d.records is not None and d.records.num_rows]
    record_fetch(services, results, "share", started)
    records = codec.render_records(results, body.key_format, body.value_format)
    counts = {(t, p, o): a.delivery_count for (t, p), d in deliveries.items() for a in d.acquired
              for o in range(a.first_offset, a.last_offset + 1)}
    for record in records:
        record["delivery_count"] = counts.get((record["topic"], record["partition"], record["offset"]), 1)
    errors = {tp: d.error for tp, d in deliveries.items() if d.error is not None}
    return json_response({"records": records, "failed_acks": [f.model_dump() for f in failed(failed_acks)],
                          "errors": [f.model_dump() for f in failed(errors)]})


@router.post("/{group}/members/{member}/acks", response_model=ShareAckResponse,
             summary="Acknowledge records: accept, release or reject; answered once durable")
async def acknowledge(group: GroupId, member: MemberId, body: ShareAcks, services: Svc,
                      principal: Principal) -> ShareAckResponse:
    services.authorizer.check(principal, "read", "group", group)
    acks = ack_batches(body.acks)
    for topic in sorted({a.topic for a in acks}):
        services.authorizer.check(principal, "read", "topic", topic)
    errors = await blocking((await coordinator(services)).acknowledge, group, member, acks)
    return ShareAckResponse(failed_acks=failed(errors))


@router.get("/{group}", response_model=ShareGroupDescription,
            summary="Members, assignment, and each share-partition's start offset and in-flight records")
async def describe(group: GroupId, services: Svc, principal: Principal) -> ShareGroupDescription:
    services.authorizer.check(principal, "describe", "group", group)
    shares = await coordinator(services)
    found = shares.group(group)
    visible = lambda topic: services.authorizer.allowed(principal, "describe", "topic", topic)  # noqa: E731
    now = time.monotonic()
    members = [ShareMemberDescription(member_id=m.member_id, epoch=m.epoch, client_id=m.client_id,
                                      client_host=m.client_host, topics=[t for t in m.topics if visible(t)],
                                      assignment=tps(tp for tp in m.assignment if visible(tp[0])),
                                      last_heartbeat_ms_ago=max(0, int((now - m.last_seen) * 1000)))
               for m in list(found.members.values())]
    partitions = []
    for (topic, partition), state in sorted(shares.in_flight(group).items()):
        if not visible(topic):
            continue
        records = [InFlightRecord(offset=o, state=STATES[r.state], delivery_count=r.delivery_count, owner=r.owner,
                                  lock_until_ms=r.lock_until_ms if r.state is RecordState.ACQUIRED else None)
                   for o, r in state.in_flight()]
        partitions.append(SharePartitionDescription(topic=topic, partition=partition, start_offset=state.start_offset,
                                                    next_offset=state.next_offset, in_flight=records))
    return ShareGroupDescription(group=group, state=found.state, epoch=found.epoch, members=members,
                                 partitions=partitions)


def _config(services: Services, shares: ShareCoordinator, group: str) -> ShareConfig:
    own = dict(shares.configs.get(group, {}))
    return ShareConfig(group=group, config={**share_config.defaults(services.settings), **own}, overrides=sorted(own))


@router.get("/{group}/config", response_model=ShareConfig, summary="The share group's configs")
async def get_config(group: GroupId, services: Svc, principal: Principal) -> ShareConfig:
    services.authorizer.check(principal, "describe", "group", group)
    return _config(services, await coordinator(services), group)


@router.put("/{group}/config", response_model=ShareConfig,
            summary="Set share group configs (null: back to the default); nothing changes when one is refused")
async def set_config(group: GroupId, body: ShareConfigChange, services: Svc, principal: Principal) -> ShareConfig:
    services.authorizer.check(principal, "alter", "group", group)
    changes = {name: None if value is None else str(value) for name, value in body.config.items()}
    shares = await coordinator(services)
    await blocking(shares.set_configs, group, changes)
    return _config(services, shares, group)


@router.delete("/{group}", status_code=204,
               summary="Delete a share group without members: its share-partitions' state and configs")
async def delete(group: GroupId, services: Svc, principal: Principal) -> Response:
    services.authorizer.check(principal, "delete", "group", group)
    await blocking((await coordinator(services)).delete_group, group)
    return Response(status_code=204)
