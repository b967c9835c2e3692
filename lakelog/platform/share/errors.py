"""Errors of share groups (KIP-932), with Kafka's error names."""

from __future__ import annotations

from lakelog.platform.errors import LakelogError


class InvalidRecordState(LakelogError):
    """An acknowledgement of a record this member does not hold (never acquired, acknowledged already, or
    its acquisition lock expired and it went back to the group)."""

    code = "INVALID_RECORD_STATE"


class ShareSessionNotFound(LakelogError):
    code = "SHARE_SESSION_NOT_FOUND"


class InvalidShareSessionEpoch(LakelogError):
    code = "INVALID_SHARE_SESSION_EPOCH"


class FencedMemberEpoch(LakelogError):
    code = "FENCED_MEMBER_EPOCH"


class GroupNotEmpty(LakelogError):
    """Offsets of a share group with members cannot be altered or deleted (Kafka: NON_EMPTY_GROUP)."""

    code = "NON_EMPTY_GROUP"
