"""KIP-932's share groups on the wire: ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch and ShareAcknowledge,
on the node's share coordinator (`platform/share/`), which holds the logic. Topics are named by their ids
(`TopicMeta.topic_id`), as in KIP-848's heartbeats; share sessions are `share_sessions.py`'s.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from lakelog.kafka_api import nodes
from lakelog.kafka_api.batches import COMPRESSION, encode_fetch
from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import CODES, error_code, error_message
from lakelog.kafka_api.handlers.consumer_groups import per_topic, topic_ids
from lakelog.kafka_api.handlers.groups import check_group_served
from lakelog.kafka_api.messages import (
    ShareAcknowledgeResponse,
    ShareFetchResponse,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatResponse,
)
from lakelog.kafka_api.protocol import Call
from lakelog.kafka_api.threads import blocking
from lakelog.platform.cluster.errors import NodeUnavailable
from lakelog.platform.errors import LakelogError
from lakelog.platform.records import TopicPartition
from lakelog.platform.share import Ack, Delivery

FetchTopic = ShareFetchResponse.ShareFetchableTopicResponse
FetchPartition = ShareFetchResponse.ShareFetchableTopicResponse.PartitionData
AcquiredRecords = ShareFetchResponse.ShareFetchableTopicResponse.PartitionData.AcquiredRecords
FetchLeader = ShareFetchResponse.ShareFetchableTopicResponse.PartitionData.LeaderIdAndEpoch
AckTopic = ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse
AckPartition = ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse.PartitionData
AckLeader = ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse.PartitionData.LeaderIdAndEpoch
Assigned = ShareGroupHeartbeatResponse.Assignment
AssignedTopic = ShareGroupHeartbeatResponse.Assignment.TopicPartitions
Described = ShareGroupDescribeResponse.DescribedGroup
DescribedMember = ShareGroupDescribeResponse.DescribedGroup.Member
MemberAssignment = ShareGroupDescribeResponse.DescribedGroup.Member.Assignment
MemberTopic = ShareGroupDescribeResponse.DescribedGroup.Member.Assignment.TopicPartitions
NO_OPERATIONS = -2147483648
UNKNOWN_TOPIC_ID = CODES["UNKNOWN_TOPIC_ID"]


# ---- membership -----------------------------------------------------------------------------------


async def share_group_heartbeat(context: Context, call: Call) -> Any:
    request = call.body
    interval = context.services.settings.group_share_heartbeat_interval_ms
    try:
        check_group_served(context, request.group_id)
        topics = request.subscribed_topic_names
        if topics is not None:
            topics = [t for t in topics if context.allowed("describe", "topic", t)]
        member_id = request.member_id or str(uuid.uuid4())
        answer = await blocking(context.services.shares().heartbeat, request.group_id, member_id,
                                request.member_epoch, topics, (context.client_id or "", context.peer))
        if request.member_epoch == -1:
            context.share_sessions.forget_member(request.group_id, member_id)
        ids = await blocking(topic_ids, context)
    except Exception as exc:
        return ShareGroupHeartbeatResponse(throttle_time_ms=0, error_code=error_code(exc),
                                           error_message=error_message(exc), member_id=request.member_id or None,
                                           member_epoch=-1, heartbeat_interval_ms=interval, assignment=None)
    assignment = None if answer.assignment is None else Assigned(topic_partitions=[
        AssignedTopic(topic_id=ids[topic], partitions=parts) for topic, parts in per_topic(answer.assignment, ids)])
    return ShareGroupHeartbeatResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                       member_id=answer.member_id, member_epoch=answer.epoch,
                                       heartbeat_interval_ms=interval, assignment=assignment)


async def share_group_describe(context: Context, call: Call) -> Any:
    groups = []
    for group_id in call.body.group_ids:
        try:
            check_group_served(context, group_id, "describe")
            group = await blocking(context.services.shares().group, group_id)
            ids = await blocking(topic_ids, context)
        except Exception as exc:
            groups.append(Described(error_code=error_code(exc), error_message=error_message(exc), group_id=group_id,
                                    group_state="Dead", group_epoch=-1, assignment_epoch=-1, assignor_name="",
                                    members=[], authorized_operations=NO_OPERATIONS))
            continue
        members = [DescribedMember(
            member_id=m.member_id, rack_id=None, member_epoch=m.epoch, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=list(m.topics),
            assignment=MemberAssignment(topic_partitions=[
                MemberTopic(topic_id=ids[t], topic_name=t, partitions=parts) for t, parts in per_topic(m.assignment,
                                                                                                        ids)]))
            for m in group.members.values()]
        groups.append(Described(error_code=0, error_message=None, group_id=group_id, group_state=group.state,
                                group_epoch=group.epoch, assignment_epoch=group.epoch, assignor_name="simple",
                                members=members, authorized_operations=NO_OPERATIONS))
    return ShareGroupDescribeResponse(throttle_time_ms=0, groups=groups)


# ---- deliveries and acknowledgements ----------------------------------------------------------------


def _acks(topics: list[Any], names: dict[uuid.UUID, str]) -> tuple[list[Ack], list[tuple[uuid.UUID, int]]]:
    """The acknowledgement batches of a request's topics, and the (topic id, partition)s of unknown topics."""
    acks, unknown = [], []
    for topic in topics:
        name = names.get(topic.topic_id)
        for p in topic.partitions:
            if name is None:
                unknown.append((topic.topic_id, p.partition_index))
                continue
            for batch in p.acknowledgement_batches:
                acks.append(Ack(name, p.partition_index, batch.first_offset, batch.last_offset,
                                tuple(batch.acknowledge_types)))
    return acks, unknown


async def relayed(context: Context, call: Call, group: str) -> Any | None:
    """The answer of the group's coordinator when it is another node (see relay.py), else None."""
    if nodes.coordinates(context, group) or context.services.authorizer.enabled:
        return None
    coordinator = nodes.coordinator(context, group)
    try:
        return await context.relays.call((coordinator.host, coordinator.port), call)
    except (OSError, asyncio.IncompleteReadError) as exc:  # answered in the call's error field
        raise NodeUnavailable(f"the coordinator of share group {group!r} did not answer: {exc}; retry") from None


async def share_fetch(context: Context, call: Call) -> Any:
    request = call.body
    if (answer := await relayed(context, call, request.group_id or "")) is not None:
        return answer
    services = context.services
    lock_ms = services.settings.group_share_record_lock_duration_ms
    group, member = request.group_id or "", request.member_id or ""
    try:
        check_group_served(context, group)
        ids = await blocking(topic_ids, context)
        names = {topic_id: name for name, topic_id in ids.items()}
        acks, unknown = _acks(request.topics, names)
        added = [(names[t.topic_id], p.partition_index) for t in request.topics if t.topic_id in names
                 for p in t.partitions]
        forgotten = [(names[t.topic_id], p) for t in request.forgotten_topics_data if t.topic_id in names
                     for p in t.partitions]
        session = context.share_sessions.step(group, member, request.share_session_epoch, added, forgotten,
                                              bool(acks))
        shares = services.shares()
        lock_ms = shares.config(group).lock_ms
        wanted = [tp for tp in (session.partitions if session else []) if context.allowed("read", "topic", tp[0])]
        refused = [tp for tp in (session.partitions if session else []) if tp not in wanted]
        wait_ms = min(request.max_wait_ms, services.settings.max_poll_timeout_ms)
        failed, deliveries = await blocking(shares.fetch, group, member, wanted, acks, request.max_records or 500,
                                            wait_ms, request.max_bytes or None)
        if session is None:  # closed: what the member still holds goes back to the group
            await blocking(shares.release, group, member)
    except Exception as exc:
        return ShareFetchResponse(throttle_time_ms=0, error_code=error_code(exc), error_message=error_message(exc),
                                  acquisition_lock_timeout_ms=lock_ms, responses=[], node_endpoints=[])
    answered = list(dict.fromkeys([*deliveries, *refused, *((a.topic, a.partition) for a in acks)]))
    per_topic: dict[str, list[Any]] = {}
    for tp in answered:
        per_topic.setdefault(tp[0], []).append(_fetched(context, tp, deliveries.get(tp), tp in refused,
                                                        failed.get(tp)))
    responses = [FetchTopic(topic_id=ids[name], partitions=parts) for name, parts in per_topic.items() if name in ids]
    responses += [FetchTopic(topic_id=topic_id, partitions=[_unknown_fetched(p)]) for topic_id, p in unknown]
    return ShareFetchResponse(throttle_time_ms=0, error_code=0, error_message=None,
                              acquisition_lock_timeout_ms=lock_ms, responses=responses, node_endpoints=[])


def _fetched(context: Context, tp: TopicPartition, delivery: Delivery | None, refused: bool,
             ack_error: LakelogError | None) -> Any:
    code, message, records, acquired = 0, None, b"", []
    if refused:
        code, message = CODES["TOPIC_AUTHORIZATION_FAILED"], f"principal may not read topic {tp[0]!r}"
    elif delivery is not None and delivery.error is not None:
        code, message = error_code(delivery.error), error_message(delivery.error)
    elif delivery is not None and delivery.records is not None and delivery.acquired:
        records = encode_fetch(delivery.records, _compression(context, tp[0]))
        acquired = [AcquiredRecords(first_offset=a.first_offset, last_offset=a.last_offset,
                                    delivery_count=a.delivery_count) for a in delivery.acquired]
    return FetchPartition(partition_index=tp[1], error_code=code, error_message=message,
                          acknowledge_error_code=error_code(ack_error) if ack_error else 0,
                          acknowledge_error_message=error_message(ack_error) if ack_error else None,
                          current_leader=FetchLeader(leader_id=-1, leader_epoch=-1), records=records,
                          acquired_records=acquired)


def _unknown_fetched(partition: int) -> Any:
    return FetchPartition(partition_index=partition, error_code=UNKNOWN_TOPIC_ID, error_message="unknown topic id",
                          acknowledge_error_code=UNKNOWN_TOPIC_ID, acknowledge_error_message="unknown topic id",
                          current_leader=FetchLeader(leader_id=-1, leader_epoch=-1), records=b"", acquired_records=[])


def _compression(context: Context, topic: str) -> int:
    try:
        return COMPRESSION[context.services.broker.topic(topic).config.compression_type]
    except LakelogError:
        return 0


async def share_acknowledge(context: Context, call: Call) -> Any:
    request = call.body
    if (answer := await relayed(context, call, request.group_id or "")) is not None:
        return answer
    group, member = request.group_id or "", request.member_id or ""
    try:
        check_group_served(context, group)
        ids = await blocking(topic_ids, context)
        names = {topic_id: name for name, topic_id in ids.items()}
        acks, unknown = _acks(request.topics, names)
        context.share_sessions.check(group, member, request.share_session_epoch, bool(acks))
        shares = context.services.shares()
        failed = await blocking(shares.acknowledge, group, member, acks)
        if request.share_session_epoch == -1:
            await blocking(shares.release, group, member)
    except Exception as exc:
        return ShareAcknowledgeResponse(throttle_time_ms=0, error_code=error_code(exc),
                                        error_message=error_message(exc), responses=[], node_endpoints=[])
    per_topic: dict[str, list[Any]] = {}
    for tp in dict.fromkeys((a.topic, a.partition) for a in acks):
        refused = failed.get(tp)
        per_topic.setdefault(tp[0], []).append(AckPartition(
            partition_index=tp[1], error_code=error_code(refused) if refused else 0,
            error_message=error_message(refused) if refused else None,
            current_leader=AckLeader(leader_id=-1, leader_epoch=-1)))
    responses = [AckTopic(topic_id=ids[name], partitions=parts) for name, parts in per_topic.items()]
    responses += [AckTopic(topic_id=topic_id, partitions=[AckPartition(
        partition_index=p, error_code=UNKNOWN_TOPIC_ID, error_message="unknown topic id",
        current_leader=AckLeader(leader_id=-1, leader_epoch=-1))]) for topic_id, p in unknown]
    return ShareAcknowledgeResponse(throttle_time_ms=0, error_code=0, error_message=None, responses=responses,
                                    node_endpoints=[])
