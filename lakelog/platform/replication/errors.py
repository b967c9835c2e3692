"""Errors of replication."""

from lakelog.platform.errors import LakelogError, NotEnoughReplicas


class ReplicaDiverged(LakelogError):
    """A follower holds a commit the leader does not: it must be truncated before it catches up."""

    code = "REPLICA_DIVERGED"


class ElectionNotAllowed(LakelogError):
    code = "ELIGIBLE_LEADERS_NOT_AVAILABLE"


class FencedLeaderEpoch(LakelogError):
    code = "FENCED_LEADER_EPOCH"


class SiteUnavailable(LakelogError):
    code = "KAFKA_STORAGE_ERROR"
    retriable = True


__all__ = ["ElectionNotAllowed", "FencedLeaderEpoch", "NotEnoughReplicas", "ReplicaDiverged", "SiteUnavailable"]
