"""The classic consumer-group protocol and group offsets, on lakelog's group coordinator.

JoinGroup, SyncGroup, Heartbeat and LeaveGroup drive the coordinator's classic groups
(`platform/groups/classic.py`): the group's leader member computes the assignment and the coordinator
hands it out. Offsets are the same committed offsets HTTP groups use (`_control/consumer_offsets`), so
a group committed over Kafka shows in `GET /v1/groups/{g}` and the CLI. A request reaching a node that
does not coordinate the group is answered NOT_COORDINATOR, and the client asks FindCoordinator again.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TypeAlias

from kafka.protocol.admin import DeleteGroupsResponse, DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupResponse,
)

from lakelog.kafka_api import nodes
from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import CODES, error_code, error_message
from lakelog.kafka_api.protocol import Call
from lakelog.kafka_api.threads import blocking
from lakelog.platform.acl import GroupAuthorizationFailed
from lakelog.platform.cluster.errors import NotCoordinator
from lakelog.platform.groups.classic import JoinRequest, Protocol
from lakelog.platform.groups.errors import CoordinatorLoading, GroupIdNotFound, MemberIdRequired

JoinMember: TypeAlias = JoinGroupResponse.JoinGroupResponseMember
LeaveMember: TypeAlias = LeaveGroupResponse.MemberResponse
CommitTopic: TypeAlias = OffsetCommitResponse.OffsetCommitResponseTopic
CommitPartition: TypeAlias = OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition
FetchTopic: TypeAlias = OffsetFetchResponse.OffsetFetchResponseTopic
FetchPartition: TypeAlias = OffsetFetchResponse.OffsetFetchResponseTopic.OffsetFetchResponsePartition
Described: TypeAlias = DescribeGroupsResponse.DescribedGroup
DescribedMember: TypeAlias = DescribeGroupsResponse.DescribedGroup.DescribedGroupMember
NO_GENERATION = -1


def check_group_served(context: Context, group: str, operation: str = "read") -> None:
    """Raise unless this node coordinates `group` now (with its offsets loaded) and the caller may
    `operation` it."""
    services = context.services
    if services.handing_over or not nodes.coordinates(context, group):
        raise NotCoordinator(f"this node does not coordinate group {group!r}: ask FindCoordinator again")
    if services.coordinator.taking_over(group):
        raise CoordinatorLoading(f"group {group!r} is being taken over by this node; retry shortly")
    if not context.allowed(operation, "group", group):
        raise GroupAuthorizationFailed(f"principal {context.principal!r} may not {operation} group {group!r}")


# ---- membership ------------------------------------------------------------------


async def join_group(context: Context, call: Call) -> JoinGroupResponse:
    request = call.body
    try:
        check_group_served(context, request.group_id)
        join = JoinRequest(
            member_id=request.member_id or "", group_instance_id=request.group_instance_id,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms if call.version >= 1 else request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=tuple(Protocol(p.name, bytes(p.metadata or b"")) for p in request.protocols),
            client_id=context.client_id or "", client_host=context.peer, require_known_member_id=call.version >= 4)
        new_id = f"{context.client_id or 'consumer'}-{uuid.uuid4()}"
        result = await asyncio.wrap_future(context.services.coordinator.classic_join(request.group_id, join, new_id))
    except MemberIdRequired as exc:
        return _join_failed(CODES["MEMBER_ID_REQUIRED"], exc.member_id)
    except Exception as exc:
        return _join_failed(error_code(exc), request.member_id or "")
    members = [JoinMember(member_id=m, group_instance_id=instance, metadata=metadata)
               for m, instance, metadata in result.members]
    return JoinGroupResponse(throttle_time_ms=0, error_code=0, generation_id=result.generation,
                             protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                             leader=result.leader, member_id=result.member_id, members=members)


def _join_failed(code: int, member_id: str) -> JoinGroupResponse:
    return JoinGroupResponse(throttle_time_ms=0, error_code=code, generation_id=NO_GENERATION, protocol_type=None,
                             protocol_name=None, leader="", member_id=member_id, members=[])


async def sync_group(context: Context, call: Call) -> SyncGroupResponse:
    request = call.body
    try:
        check_group_served(context, request.group_id)
        assignments = {a.member_id: bytes(a.assignment or b"") for a in request.assignments}
        result = await asyncio.wrap_future(context.services.coordinator.classic_sync(
            request.group_id, request.member_id, request.generation_id, request.group_instance_id,
            request.protocol_type, request.protocol_name, assignments))
    except Exception as exc:
        return SyncGroupResponse(throttle_time_ms=0, error_code=error_code(exc), protocol_type=None,
                                 protocol_name=None, assignment=b"")
    return SyncGroupResponse(throttle_time_ms=0, error_code=0, protocol_type=result.protocol_type,
                             protocol_name=result.protocol_name, assignment=result.assignment)


async def heartbeat(context: Context, call: Call) -> HeartbeatResponse:
    request = call.body
    try:
        check_group_served(context, request.group_id)
        context.services.coordinator.classic_heartbeat(request.group_id, request.member_id, request.generation_id,
                                                       request.group_instance_id)
    except Exception as exc:
        return HeartbeatResponse(throttle_time_ms=0, error_code=error_code(exc))
    return HeartbeatResponse(throttle_time_ms=0, error_code=0)


async def leave_group(context: Context, call: Call) -> LeaveGroupResponse:
    request = call.body
    leaving = [(m.member_id, m.group_instance_id) for m in request.members] if call.version >= 3 else [
        (request.member_id, None)]
    try:
        check_group_served(context, request.group_id)
    except Exception as exc:
        return LeaveGroupResponse(throttle_time_ms=0, error_code=error_code(exc), members=[])
    answers = []
    for member_id, instance in leaving:
        try:
            context.services.coordinator.classic_leave(request.group_id, member_id, instance)
            code = 0
        except Exception as exc:
            code = error_code(exc)
        answers.append(LeaveMember(member_id=member_id, group_instance_id=instance, error_code=code))
    top = answers[0].error_code if call.version < 3 else 0
    return LeaveGroupResponse(throttle_time_ms=0, error_code=top, members=answers)


# ---- offsets ----------------------------------------------------------------------


async def offset_commit(context: Context, call: Call) -> OffsetCommitResponse:
    request = call.body
    offsets, refused = [], {}
    try:
        check_group_served(context, request.group_id)
        for topic in request.topics:
            if not context.allowed("read", "topic", topic.name):
                refused[topic.name] = CODES["TOPIC_AUTHORIZATION_FAILED"]
                continue
            offsets += [(topic.name, p.partition_index, p.committed_offset, p.committed_metadata)
                        for p in topic.partitions]
        if offsets:
            member_id = request.member_id or None
            committed = context.services.coordinator.commit(
                request.group_id, member_id, request.generation_id_or_member_epoch, offsets,
                group_instance_id=request.group_instance_id)
            await asyncio.wrap_future(committed)
        code = 0
    except Exception as exc:
        code = error_code(exc)
    topics = [CommitTopic(name=topic.name, partitions=[
        CommitPartition(partition_index=p.partition_index, error_code=refused.get(topic.name, code))
        for p in topic.partitions]) for topic in request.topics]
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)


async def offset_fetch(context: Context, call: Call) -> OffsetFetchResponse:
    request = call.body
    try:
        check_group_served(context, request.group_id, "describe")
        # A consumer asks where to start after a rebalance: the previous owner's last commit may still
        # be on its way to storage.
        in_flight = context.services.coordinator.commits_in_flight(request.group_id)
        await asyncio.gather(*map(asyncio.wrap_future, in_flight), return_exceptions=True)
        committed = _committed(context, request.group_id)
    except Exception as exc:
        return _offset_fetch_failed(request, call.version, error_code(exc))
    if request.topics is None:  # every topic the group committed
        wanted: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            wanted.setdefault(topic, []).append(partition)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in request.topics}
    topics = []
    for topic, partitions in wanted.items():
        code = 0 if context.allowed("describe", "topic", topic) else CODES["TOPIC_AUTHORIZATION_FAILED"]
        answered = []
        for partition in partitions:
            found = committed.get((topic, partition)) if code == 0 else None
            answered.append(FetchPartition(
                partition_index=partition, committed_offset=found.offset if found else -1, committed_leader_epoch=-1,
                metadata=(found.metadata or "") if found else "", error_code=code))
        topics.append(FetchTopic(name=topic, partitions=answered))
    return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=0)


def _offset_fetch_failed(request: OffsetFetchRequest, version: int, code: int) -> OffsetFetchResponse:
    """The group's error: top-level from v2; before v2 there is no such field, so every partition asked
    carries it (an answer without it would read as "nothing committed")."""
    if version >= 2:
        return OffsetFetchResponse(throttle_time_ms=0, topics=[], error_code=code)
    topics = [FetchTopic(name=t.name, partitions=[
        FetchPartition(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="", error_code=code)
        for p in t.partition_indexes]) for t in request.topics or []]
    return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=code)


def _committed(context: Context, group: str) -> dict:
    try:
        return context.services.coordinator.committed(group)
    except GroupIdNotFound:  # nothing committed yet: every partition answers -1
        return {}


# ---- administration --------------------------------------------------------------


async def list_groups(context: Context, call: Call) -> ListGroupsResponse:
    states = set(call.body.states_filter or []) if call.version >= 4 else set()
    types = {t.lower() for t in call.body.types_filter or []} if call.version >= 5 else set()
    kinds = context.services.coordinator.group_types()  # KIP-848's groups "consumer", the others "classic"
    listed = [(g, state, kinds.get(g, "classic")) for g, state in context.services.coordinator.list_groups()]
    shares = await blocking(context.services.shares)
    listed += [(g, shares.group(g).state, "share") for g in shares.group_ids()]
    groups = [ListGroupsResponse.ListedGroup(group_id=g, protocol_type="share" if kind == "share" else "consumer",
                                             group_state=state, group_type=kind)
              for g, state, kind in listed
              if context.allowed("describe", "group", g) and (not states or state in states)
              and (not types or kind in types)]
    return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=groups)


async def describe_groups(context: Context, call: Call) -> DescribeGroupsResponse:
    return DescribeGroupsResponse(throttle_time_ms=0, groups=[_describe(context, g) for g in call.body.groups])


def _describe(context: Context, group: str) -> Described:
    try:
        check_group_served(context, group, "describe")
        view = context.services.coordinator.describe_classic(group)
    except GroupIdNotFound:  # Kafka describes an unknown group as Dead, without an error
        return Described(error_code=0, error_message=None, group_id=group, group_state="Dead", protocol_type="",
                         protocol_data="", members=[])
    except Exception as exc:
        return Described(error_code=error_code(exc), error_message=error_message(exc), group_id=group,
                         group_state="", protocol_type="", protocol_data="", members=[])
    members = [DescribedMember(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                               client_host=m.client_host, member_metadata=m.metadata,
                               member_assignment=m.assignment) for m in view.members]
    return Described(error_code=0, error_message=None, group_id=group, group_state=view.state,
                     protocol_type=view.protocol_type or "", protocol_data=view.protocol_name or "", members=members)


async def delete_groups(context: Context, call: Call) -> DeleteGroupsResponse:
    results = []
    for group in call.body.groups_names:
        try:
            check_group_served(context, group, "delete")
            shares = await blocking(context.services.shares)
            if group in shares.group_ids():
                await blocking(shares.delete_group, group)
            else:
                await blocking(context.services.coordinator.delete_group, group)
            code = 0
        except Exception as exc:
            code = error_code(exc)
        results.append(DeleteGroupsResponse.DeletableGroupResult(group_id=group, error_code=code))
    return DeleteGroupsResponse(throttle_time_ms=0, results=results)
