"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets: a share group's start
offsets (every record before one is accepted or archived), read, set or forgotten. Setting and forgetting need
a group without members, as in Kafka."""

from __future__ import annotations

from typing import Any

from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import CODES, error_code, error_message
from lakelog.kafka_api.handlers.consumer_groups import topic_ids
from lakelog.kafka_api.handlers.groups import check_group_served
from lakelog.kafka_api.messages import (
    AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponse,
)
from lakelog.kafka_api.protocol import Call
from lakelog.kafka_api.threads import blocking

DescribedGroup = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup
DescribedTopic = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup.\
    DescribeShareGroupOffsetsResponseTopic
DescribedPartition = DescribedTopic.DescribeShareGroupOffsetsResponsePartition
AlteredTopic = AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic
AlteredPartition = AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic.\
    AlterShareGroupOffsetsResponsePartition
DeletedTopic = DeleteShareGroupOffsetsResponse.DeleteShareGroupOffsetsResponseTopic
NO_OFFSET = -1
ZERO_ID = "00000000-0000-0000-0000-000000000000"


async def describe_share_group_offsets(context: Context, call: Call) -> Any:
    groups = []
    for wanted in call.body.groups:
        try:
            check_group_served(context, wanted.group_id, "describe")
            shares = await blocking(context.services.shares)
            starts = await blocking(shares.start_offsets, wanted.group_id)
            ids = await blocking(topic_ids, context)
        except Exception as exc:
            groups.append(DescribedGroup(group_id=wanted.group_id, topics=[], error_code=error_code(exc),
                                         error_message=error_message(exc)))
            continue
        asked = ({t.topic_name: list(t.partitions) for t in wanted.topics} if wanted.topics is not None else
                 _by_topic(starts))
        topics = [DescribedTopic(topic_name=topic, topic_id=ids.get(topic, ZERO_ID), partitions=[
            DescribedPartition(partition_index=p, start_offset=starts.get((topic, p), NO_OFFSET), leader_epoch=0,
                               error_code=0 if topic in ids else CODES["UNKNOWN_TOPIC_OR_PARTITION"],
                               error_message=None) for p in partitions]) for topic, partitions in sorted(asked.items())]
        groups.append(DescribedGroup(group_id=wanted.group_id, topics=topics, error_code=0, error_message=None))
    return DescribeShareGroupOffsetsResponse(throttle_time_ms=0, groups=groups)


def _by_topic(starts: dict[tuple[str, int], int]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(starts):
        topics.setdefault(topic, []).append(partition)
    return topics


async def alter_share_group_offsets(context: Context, call: Call) -> Any:
    request = call.body
    offsets = {(t.topic_name, p.partition_index): p.start_offset for t in request.topics for p in t.partitions}
    error: Exception | None = None
    try:
        check_group_served(context, request.group_id, "read")
        shares = await blocking(context.services.shares)
        await blocking(shares.alter_offsets, request.group_id, offsets)
        ids = await blocking(topic_ids, context)
    except Exception as exc:
        error, ids = exc, {}
    code, message = (error_code(error), error_message(error)) if error else (0, None)
    responses = [AlteredTopic(topic_name=t.topic_name, topic_id=ids.get(t.topic_name, ZERO_ID), partitions=[
        AlteredPartition(partition_index=p.partition_index, error_code=code, error_message=message)
        for p in t.partitions]) for t in request.topics]
    return AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                          responses=responses)


async def delete_share_group_offsets(context: Context, call: Call) -> Any:
    request = call.body
    topics = [t.topic_name for t in request.topics]
    try:
        check_group_served(context, request.group_id, "delete")
        shares = await blocking(context.services.shares)
        await blocking(shares.delete_offsets, request.group_id, topics)
        ids = await blocking(topic_ids, context)
    except Exception as exc:
        return DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=error_code(exc),
                                               error_message=error_message(exc), responses=[])
    return DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=0, error_message=None, responses=[
        DeletedTopic(topic_name=t, topic_id=ids.get(t, ZERO_ID), error_code=0, error_message=None) for t in topics])
