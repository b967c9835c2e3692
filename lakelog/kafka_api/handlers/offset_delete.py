"""OffsetDelete (API 47): a group's committed offsets of some partitions removed, as Kafka removes them.

On the group's coordinator only (NOT_COORDINATOR elsewhere), with DELETE on the group and READ on each
topic. A partition of a topic the group's active members subscribe to is refused with
GROUP_SUBSCRIBED_TO_TOPIC (they would commit it again); an unknown group is GROUP_ID_NOT_FOUND. The rows
leave the offsets table (`OffsetStore.delete_offsets`), so every node and `GET /v1/groups/{g}/offsets`
stop showing them.
"""

from __future__ import annotations

from typing import TypeAlias

from kafka.protocol.consumer import OffsetDeleteResponse

from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import CODES, error_code
from lakelog.kafka_api.handlers.groups import check_group_served
from lakelog.kafka_api.protocol import Call
from lakelog.kafka_api.threads import blocking

DeletedTopic: TypeAlias = OffsetDeleteResponse.OffsetDeleteResponseTopic
DeletedPartition: TypeAlias = OffsetDeleteResponse.OffsetDeleteResponseTopic.OffsetDeleteResponsePartition


async def offset_delete(context: Context, call: Call) -> OffsetDeleteResponse:
    request = call.body
    readable = {t.name for t in request.topics if context.allowed("read", "topic", t.name)}
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions if t.name in readable]
    try:
        check_group_served(context, request.group_id, "delete")
        outcomes = await blocking(context.services.coordinator.delete_offsets, request.group_id, wanted)
    except Exception as exc:  # the group itself: unknown, not coordinated here, not allowed
        return OffsetDeleteResponse(error_code=error_code(exc), throttle_time_ms=0, topics=[])

    def code(topic: str, partition: int) -> int:
        if topic not in readable:
            return CODES["TOPIC_AUTHORIZATION_FAILED"]
        refused = outcomes.get((topic, partition))
        return 0 if refused is None else error_code(refused)

    topics = [DeletedTopic(name=t.name, partitions=[DeletedPartition(partition_index=p.partition_index,
                                                                     error_code=code(t.name, p.partition_index))
                                                    for p in t.partitions]) for t in request.topics]
    return OffsetDeleteResponse(error_code=0, throttle_time_ms=0, topics=topics)
