"""KIP-848's consumer group protocol (`group.protocol=consumer`): ConsumerGroupHeartbeat and
ConsumerGroupDescribe, on the group coordinator's consumer groups (`platform/groups/consumer_group.py`).

The server assigns; members learn their assignment in heartbeat answers, topics named by their topic ids
(`TopicMeta.topic_id`), which the client resolves with a Metadata request by id. Offsets are committed with
OffsetCommit (v9 carries the member epoch) to the same store as every group's.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable
from typing import Any

from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import error_code, error_message
from lakelog.kafka_api.handlers.groups import check_group_served
from lakelog.kafka_api.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
)
from lakelog.kafka_api.protocol import Call
from lakelog.kafka_api.threads import blocking
from lakelog.platform.groups.consumer_group import ConsumerHeartbeat, kafka_assignor
from lakelog.platform.groups.errors import GroupIdNotFound
from lakelog.platform.records import TopicPartition

Assigned = ConsumerGroupHeartbeatResponse.Assignment
AssignedTopic = ConsumerGroupHeartbeatResponse.Assignment.TopicPartitions
Described = ConsumerGroupDescribeResponse.DescribedGroup
DescribedMember = ConsumerGroupDescribeResponse.DescribedGroup.Member
MemberAssignment = ConsumerGroupDescribeResponse.DescribedGroup.Member.Assignment
MemberTopic = ConsumerGroupDescribeResponse.DescribedGroup.Member.Assignment.TopicPartitions
NO_OPERATIONS = -2147483648


async def consumer_group_heartbeat(context: Context, call: Call) -> Any:
    request = call.body
    settings = context.services.settings
    interval = settings.group_consumer_heartbeat_interval_ms
    try:
        check_group_served(context, request.group_id)
        ids = await blocking(topic_ids, context)
        names = {topic_id: name for name, topic_id in ids.items()}
        member_id = request.member_id or (str(uuid.uuid4()) if request.member_epoch == 0 else "")
        heartbeat = ConsumerHeartbeat(
            member_id=member_id, member_epoch=request.member_epoch,
            session_timeout_ms=settings.group_consumer_session_timeout_ms, instance_id=request.instance_id,
            topics=None if request.subscribed_topic_names is None else tuple(request.subscribed_topic_names),
            regex=_regex(call, request), assignor=request.server_assignor, owned=_owned(request, names),
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            can_read=lambda topic: context.allowed("describe", "topic", topic))
        for topic in heartbeat.topics or ():
            if not context.allowed("describe", "topic", topic):
                heartbeat = _without(heartbeat, topic)
        answer = await blocking(context.services.coordinator.consumer_heartbeat, request.group_id, heartbeat)
    except Exception as exc:
        return ConsumerGroupHeartbeatResponse(throttle_time_ms=0, error_code=error_code(exc),
                                              error_message=error_message(exc), member_id=request.member_id or None,
                                              member_epoch=-1, heartbeat_interval_ms=interval, assignment=None)
    assignment = None if answer.assignment is None else Assigned(topic_partitions=_by_id(answer.assignment, ids))
    return ConsumerGroupHeartbeatResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                          member_id=answer.member_id, member_epoch=answer.epoch,
                                          heartbeat_interval_ms=interval, assignment=assignment)


def _regex(call: Call, request: Any) -> str | None:
    """The subscription's RE2 pattern (v1+; v0's requests carry none)."""
    return request.subscribed_topic_regex if call.version >= 1 else None


def _owned(request: Any, names: dict[uuid.UUID, str]) -> frozenset[TopicPartition] | None:
    if request.topic_partitions is None:
        return None
    return frozenset((names[t.topic_id], p) for t in request.topic_partitions if t.topic_id in names
                     for p in t.partitions)


def _without(heartbeat: ConsumerHeartbeat, topic: str) -> ConsumerHeartbeat:
    """A subscription without a topic the member may not describe (as Kafka leaves it out)."""
    topics = tuple(t for t in heartbeat.topics or () if t != topic)
    return dataclasses.replace(heartbeat, topics=topics)


def topic_ids(context: Context) -> dict[str, uuid.UUID]:
    """Each topic's Kafka topic id, by name (KIP-848's and KIP-932's messages name topics by id)."""
    return {meta.name: meta.topic_id for meta in context.services.broker.list_topics()}


def per_topic(partitions: Iterable[TopicPartition], ids: dict[str, uuid.UUID]) -> list[tuple[str, list[int]]]:
    """(topic, its sorted partitions) of the topics that still have an id (a deleted topic's are left out)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return [(topic, sorted(parts)) for topic, parts in sorted(by_topic.items()) if topic in ids]


def _by_id(partitions: list[TopicPartition], ids: dict[str, uuid.UUID]) -> list[Any]:
    return [AssignedTopic(topic_id=ids[topic], partitions=parts) for topic, parts in per_topic(partitions, ids)]


async def consumer_group_describe(context: Context, call: Call) -> Any:
    groups = []
    for group in call.body.group_ids:
        try:
            check_group_served(context, group, "describe")
            view = await blocking(context.services.coordinator.describe, group)
            ids = await blocking(topic_ids, context)
        except Exception as exc:
            groups.append(_failed(group, exc))
            continue
        if view.group_type != "consumer":
            groups.append(_failed(group, GroupIdNotFound(f"group {group!r} is not a consumer group")))
            continue
        members = [DescribedMember(
            member_id=m.member_id, instance_id=m.group_instance_id, rack_id=None, member_epoch=m.epoch,
            client_id="", client_host="", subscribed_topic_names=m.subscription, subscribed_topic_regex=m.pattern,
            assignment=MemberAssignment(topic_partitions=_described(m.assignment + m.revoking, ids)),
            target_assignment=MemberAssignment(topic_partitions=_described(m.assignment, ids)),
            member_type=0) for m in view.members]
        groups.append(Described(error_code=0, error_message=None, group_id=group, group_state=view.state,
                                group_epoch=view.generation, assignment_epoch=view.generation,
                                assignor_name=kafka_assignor(view.assignor), members=members,
                                authorized_operations=NO_OPERATIONS))
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=groups)


def _described(partitions: list[TopicPartition], ids: dict[str, uuid.UUID]) -> list[Any]:
    return [MemberTopic(topic_id=ids[topic], topic_name=topic, partitions=parts)
            for topic, parts in per_topic(partitions, ids)]


def _failed(group: str, exc: Exception) -> Any:
    return Described(error_code=error_code(exc), error_message=error_message(exc), group_id=group, group_state="",
                     group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[],
                     authorized_operations=NO_OPERATIONS)
