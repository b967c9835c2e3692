"""Errors of the cluster layer."""

from __future__ import annotations

from lakelog.platform.errors import LakelogError


class NotInCluster(LakelogError):
    """This node could not renew its membership (store unreachable): it does not act as an owner."""

    code = "BROKER_NOT_AVAILABLE"
    retriable = True


class NodeUnavailable(LakelogError):
    """The node owning a topic or group did not answer a node-to-node request."""

    code = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


class NotLeader(LakelogError):
    """A node asked for what only a topic's leader answers (its log ends, to judge an offset by) while it
    does not lead the topic in its own view of the cluster: the asker's view is older or newer; ask again."""

    code = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


class NotCoordinator(LakelogError):
    """This node does not coordinate the group (any more, or not yet in its view): ask again."""

    code = "NOT_COORDINATOR"
    retriable = True


class ClusterAuthFailed(LakelogError):
    """A node-to-node request without the right cluster secret."""

    code = "CLUSTER_AUTHORIZATION_FAILED"


class RemoteError(LakelogError):
    """An error the owner node answered with, for a kind this node has no type of: code and retriability
    are kept as sent."""

    def __init__(self, message: str, code: str, retriable: bool) -> None:
        super().__init__(message)
        self.code = code
        self.retriable = retriable


class ForwardedObjectMissing(LakelogError):
    """The object a forwarded produce reference names is not there (its sender deleted it, having given up):
    nothing was written; the sender's calls are retried."""

    code = "KAFKA_STORAGE_ERROR"
    retriable = True


class ForwardedObjectMismatch(LakelogError):
    """A forwarded produce reference whose object does not hold what it says (size, rows or calls), or that
    names no forward object: nothing was written."""

    code = "CORRUPT_MESSAGE"
