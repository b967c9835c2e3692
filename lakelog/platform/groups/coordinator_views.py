"""What the coordinator answers with: a poll's records, and groups and members as described (HTTP members,
and Kafka's classic-protocol members read from the consumer protocol's bytes).

Owns these frozen dataclasses only: built under the coordinator's lock, read by any thread afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from lakelog.platform.groups.classic import ClassicGroup
from lakelog.platform.groups.consumer_protocol import consumer_assignment, consumer_subscription
from lakelog.platform.groups.offsets import CommittedOffset
from lakelog.platform.records import FetchResult, TopicPartition


@dataclass(frozen=True)
class Poll:
    generation: int
    results: list[FetchResult]
    number: int = 0  # the member acknowledges it with its next poll (`after`)


@dataclass(frozen=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    assignment: list[TopicPartition]
    revoking: list[TopicPartition]
    subscription: list[str]
    pattern: str | None
    last_heartbeat_ms_ago: int
    epoch: int = 0  # a consumer-protocol member's epoch (KIP-848)


@dataclass(frozen=True)
class ClassicMemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # its subscription in the group's protocol
    assignment: bytes  # as the leader assigned it


@dataclass(frozen=True)
class ClassicView:
    state: str
    protocol_type: str | None
    protocol_name: str | None
    members: list[ClassicMemberView]


@dataclass(frozen=True)
class GroupView:
    group: str
    state: str
    generation: int
    assignor: str | None
    members: list[MemberView]
    offsets: dict[TopicPartition, CommittedOffset]
    lag: dict[TopicPartition, int]  # log end offset - committed (or - log start when nothing committed)
    group_type: str = "classic"  # Kafka's group type: "consumer" for KIP-848's groups


def classic_members(classic: ClassicGroup, now: float) -> list[MemberView]:
    """Kafka-protocol members as HTTP describes members: subscriptions and assignments read from the
    consumer protocol's bytes."""
    return [MemberView(m.member_id, m.group_instance_id, consumer_assignment(m.assignment), [],
                       sorted(consumer_subscription(m.metadata(classic.protocol_name))), None,
                       int((now - m.last_heartbeat) * 1000))
            for m in sorted(classic.members.values(), key=lambda m: m.member_id)]
