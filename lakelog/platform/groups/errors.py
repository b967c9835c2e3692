"""Errors of the consumer-group coordinator, with Kafka's error names."""

from __future__ import annotations

from lakelog.platform.errors import LakelogError


class IllegalGeneration(LakelogError):
    """A commit or call carries a generation other than the group's current one."""

    code = "ILLEGAL_GENERATION"


class UnknownMemberId(LakelogError):
    code = "UNKNOWN_MEMBER_ID"


class FencedInstanceId(LakelogError):
    """A static member's old member id: a newer instance with the same group.instance.id replaced it."""

    code = "FENCED_INSTANCE_ID"


class GroupIdNotFound(LakelogError):
    code = "GROUP_ID_NOT_FOUND"


class NonEmptyGroup(LakelogError):
    code = "NON_EMPTY_GROUP"


class InconsistentGroupProtocol(LakelogError):
    code = "INCONSISTENT_GROUP_PROTOCOL"


class InvalidSessionTimeout(LakelogError):
    code = "INVALID_SESSION_TIMEOUT"


class InvalidGroupId(LakelogError):
    code = "INVALID_GROUP_ID"


class NoOffsetForPartition(LakelogError):
    """No committed offset and `auto.offset.reset=none`, or the committed offset is out of range."""

    code = "OFFSET_OUT_OF_RANGE"


class CoordinatorLoading(LakelogError):
    """This node is taking the group over and has not loaded its offsets yet."""

    code = "COORDINATOR_LOAD_IN_PROGRESS"
    retriable = True


class RebalanceInProgress(LakelogError):
    """The group is rebalancing: the member must join again before its SyncGroup, heartbeat or commit counts."""

    code = "REBALANCE_IN_PROGRESS"


class MemberIdRequired(LakelogError):
    """JoinGroup v4+ (KIP-394): a new member first gets its id (`member_id`) and joins again with it."""

    code = "MEMBER_ID_REQUIRED"

    def __init__(self, message: str, member_id: str) -> None:
        super().__init__(message)
        self.member_id = member_id


class GroupSubscribedToTopic(LakelogError):
    """OffsetDelete of a topic the group's active members subscribe to (they would commit it again)."""

    code = "GROUP_SUBSCRIBED_TO_TOPIC"


class FencedMemberEpoch(LakelogError):
    """KIP-848: a consumer-protocol member sent an epoch ahead of the one the coordinator gave it; it must
    join again (epoch 0)."""

    code = "FENCED_MEMBER_EPOCH"


class StaleMemberEpoch(LakelogError):
    """KIP-848: an offset commit with an epoch older than the member's current one (its next heartbeat gets
    the current one)."""

    code = "STALE_MEMBER_EPOCH"
    retriable = True


class UnsupportedAssignor(LakelogError):
    """KIP-848: a ServerAssignor the coordinator does not have."""

    code = "UNSUPPORTED_ASSIGNOR"
