"""acl.Authorizer: decisions cached per ACL generation, cluster rights."""

from __future__ import annotations

import pytest

from lakelog.platform.acl import CLUSTER, Acl, Authorizer, ClusterAuthorizationFailed, TopicAuthorizationFailed
from lakelog.platform.errors import InvalidRequest


class FakeStore:
    """The AclStore's decision and generation, counted."""

    def __init__(self) -> None:
        self.acls: set[tuple[str, str, str, str]] = set()
        self.generation = 0
        self.asked = 0

    def allowed(self, principal: str, operation: str, resource_type: str, name: str) -> bool:
        self.asked += 1
        return (principal, operation, resource_type, name) in self.acls

    def change(self, *acl: str, add: bool = True) -> None:
        (self.acls.add if add else self.acls.discard)(acl)  # type: ignore[arg-type]
        self.generation += 1


def test_decisions_are_cached_until_the_acls_change() -> None:
    store = FakeStore()
    authorizer = Authorizer(store, {"k": "alice"})  # type: ignore[arg-type]
    store.change("alice", "read", "topic", "t")
    for _ in range(100):
        authorizer.check("alice", "read", "topic", "t")
    assert store.asked == 1
    store.change("alice", "read", "topic", "t", add=False)
    with pytest.raises(TopicAuthorizationFailed):
        authorizer.check("alice", "read", "topic", "t")


def test_cluster_rights() -> None:
    store = FakeStore()
    authorizer = Authorizer(store, {"k": "ops"})  # type: ignore[arg-type]
    with pytest.raises(ClusterAuthorizationFailed, match="describe cluster 'kafka-cluster'"):
        authorizer.check("ops", "describe", "cluster", CLUSTER)
    store.change("ops", "describe", "cluster", CLUSTER)
    authorizer.check("ops", "describe", "cluster", CLUSTER)


def test_no_keys_means_everyone_is_a_super_user() -> None:
    authorizer = Authorizer(None, {})
    assert not authorizer.enabled and authorizer.authenticate(None) == "anonymous"
    authorizer.check("anonymous", "describe", "cluster", CLUSTER)


def test_the_cluster_acl_has_one_name() -> None:
    with pytest.raises(InvalidRequest, match="kafka-cluster"):
        Acl("ops", "cluster", "prefixed", "kafka", "describe", "allow").validate()
    Acl("ops", "cluster", "literal", CLUSTER, "describe", "allow").validate()
