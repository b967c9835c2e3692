"""KIP-848's messages (lakelog/kafka_api/messages): every version encodes and decodes back to itself, and
the listener's tables and ApiVersions serve them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kafka.protocol.api_key import ApiKey

from lakelog.kafka_api.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from lakelog.kafka_api.protocol import REQUESTS, RESPONSES, SUPPORTED

TOPIC_ID = uuid.UUID("5c1f2d8e-7a3b-4c6d-9e0f-1a2b3c4d5e6f")


def round_trip(message: Any, cls: Any, version: int) -> Any:
    message.API_VERSION = version
    return cls.decode(message.encode(), version=version)


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_request_round_trip(version: int) -> None:
    owned = [ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=TOPIC_ID, partitions=[0, 3])]
    request = ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="m-1", member_epoch=7, instance_id="i", rack_id=None, rebalance_timeout_ms=30_000,
        subscribed_topic_names=["a", "b"], subscribed_topic_regex="x.*" if version >= 1 else None,
        server_assignor="uniform", topic_partitions=owned)
    decoded = round_trip(request, ConsumerGroupHeartbeatRequest, version)
    assert decoded.member_epoch == 7 and decoded.subscribed_topic_names == ["a", "b"]
    assert decoded.subscribed_topic_regex == ("x.*" if version >= 1 else None)
    assert [(t.topic_id, t.partitions) for t in decoded.topic_partitions] == [(TOPIC_ID, [0, 3])]
    assert round_trip(ConsumerGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=3),
                      ConsumerGroupHeartbeatRequest, version).topic_partitions is None  # null: unchanged


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_response_round_trip(version: int) -> None:
    cls = ConsumerGroupHeartbeatResponse
    assignment = cls.Assignment(topic_partitions=[cls.Assignment.TopicPartitions(topic_id=TOPIC_ID, partitions=[1])])
    for given in (assignment, None):
        response = cls(throttle_time_ms=0, error_code=0, error_message=None, member_id="m", member_epoch=4,
                       heartbeat_interval_ms=5000, assignment=given)
        decoded = round_trip(response, cls, version)
        assert decoded.member_epoch == 4 and decoded.heartbeat_interval_ms == 5000
        if given is None:
            assert decoded.assignment is None
        else:
            assert [(t.topic_id, t.partitions) for t in decoded.assignment.topic_partitions] == [(TOPIC_ID, [1])]


@pytest.mark.parametrize("version", [0, 1])
def test_describe_round_trip(version: int) -> None:
    request = round_trip(ConsumerGroupDescribeRequest(group_ids=["g"], include_authorized_operations=True),
                         ConsumerGroupDescribeRequest, version)
    assert request.group_ids == ["g"] and request.include_authorized_operations
    cls = ConsumerGroupDescribeResponse
    member_cls = cls.DescribedGroup.Member
    assigned = member_cls.Assignment(topic_partitions=[
        member_cls.Assignment.TopicPartitions(topic_id=TOPIC_ID, topic_name="t", partitions=[0, 1])])
    member = member_cls(member_id="m", instance_id=None, rack_id=None, member_epoch=2, client_id="c",
                        client_host="h", subscribed_topic_names=["t"], subscribed_topic_regex=None,
                        assignment=assigned, target_assignment=assigned, member_type=0)
    group = cls.DescribedGroup(error_code=0, error_message=None, group_id="g", group_state="Stable", group_epoch=2,
                               assignment_epoch=2, assignor_name="uniform", members=[member],
                               authorized_operations=-2147483648)
    decoded = round_trip(cls(throttle_time_ms=0, groups=[group]), cls, version)
    (described,) = decoded.groups
    assert described.assignor_name == "uniform"
    assert described.members[0].assignment.topic_partitions[0].partitions == [0, 1]


def test_served() -> None:
    for key in (ApiKey.ConsumerGroupHeartbeat, ApiKey.ConsumerGroupDescribe):
        assert SUPPORTED[key] == (0, 1)
        assert REQUESTS[key].type == "request" and RESPONSES[key].type == "response"
