"""kafka_api/handlers/acls.py: Kafka's ACL bindings and filters mapped onto lakelog's ACLs, and refused with a
message where lakelog has no counterpart."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kafka.protocol.admin import ACLOperation, ACLPermissionType, ACLResourcePatternType, ACLResourceType

from lakelog.kafka_api.handlers.acls import described, kafka_binding, to_acl, to_filter
from lakelog.platform.acl import Acl
from lakelog.platform.errors import InvalidRequest

READ_ORDERS = Acl("bob", "topic", "literal", "orders", "read", "allow")
WRITE_PAY = Acl("bob", "topic", "prefixed", "pay", "write", "allow")
DENY_ALL = Acl("*", "group", "literal", "*", "all", "deny")


def creation(**changes: object) -> SimpleNamespace:
    fields = dict(resource_type=ACLResourceType.TOPIC, resource_name="orders",
                  resource_pattern_type=ACLResourcePatternType.LITERAL, principal="User:bob", host="*",
                  operation=ACLOperation.READ, permission_type=ACLPermissionType.ALLOW)
    return SimpleNamespace(**{**fields, **changes})


def test_a_creation_maps_to_lakelogs_acl_and_back() -> None:
    assert to_acl(creation()) == READ_ORDERS
    assert to_acl(creation(principal="User:*", resource_type=ACLResourceType.GROUP, resource_name="*",
                           operation=ACLOperation.ALL, permission_type=ACLPermissionType.DENY)) == DENY_ALL
    binding = kafka_binding(WRITE_PAY)
    assert binding == {"resource_type": ACLResourceType.TOPIC, "resource_name": "pay",
                       "pattern_type": ACLResourcePatternType.PREFIXED, "principal": "User:bob", "host": "*",
                       "operation": ACLOperation.WRITE, "permission_type": ACLPermissionType.ALLOW}


@pytest.mark.parametrize(("change", "words"), [
    ({"host": "10.0.0.1"}, "every host"),
    ({"principal": "Group:ops"}, "principals are users"),
    ({"principal": "bob"}, "principals are users"),
    ({"operation": ACLOperation.DESCRIBE_CONFIGS}, "operation DESCRIBE_CONFIGS has no lakelog counterpart"),
    ({"operation": ACLOperation.IDEMPOTENT_WRITE}, "IDEMPOTENT_WRITE"),
    ({"resource_type": ACLResourceType.TRANSACTIONAL_ID}, "resource type TRANSACTIONAL_ID"),
    ({"resource_pattern_type": ACLResourcePatternType.MATCH}, "pattern type MATCH"),
    ({"resource_type": ACLResourceType.CLUSTER, "resource_name": "other"}, "kafka-cluster"),
])
def test_what_does_not_map_is_refused_with_a_message(change: dict, words: str) -> None:
    with pytest.raises(InvalidRequest, match=words):
        to_acl(creation(**change))


def kafka_filter(**changes: object) -> SimpleNamespace:
    fields = dict(resource_type_filter=ACLResourceType.ANY, resource_name_filter=None,
                  pattern_type_filter=ACLResourcePatternType.ANY, principal_filter=None, host_filter=None,
                  operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY)
    return SimpleNamespace(**{**fields, **changes})


ACLS = [READ_ORDERS, WRITE_PAY, DENY_ALL]


@pytest.mark.parametrize(("changes", "expected"), [
    ({}, ACLS),
    ({"resource_type_filter": ACLResourceType.TOPIC}, [READ_ORDERS, WRITE_PAY]),
    ({"resource_name_filter": "pay"}, [WRITE_PAY]),  # ANY pattern: the exact name, whatever the pattern type
    # MATCH: every ACL applying to a resource of that name (a wildcard and a prefix too), as Kafka matches
    ({"resource_name_filter": "payments", "pattern_type_filter": ACLResourcePatternType.MATCH}, [WRITE_PAY, DENY_ALL]),
    ({"resource_type_filter": ACLResourceType.TOPIC, "resource_name_filter": "payments",
      "pattern_type_filter": ACLResourcePatternType.MATCH}, [WRITE_PAY]),
    ({"resource_name_filter": "anything", "pattern_type_filter": ACLResourcePatternType.MATCH}, [DENY_ALL]),
    ({"pattern_type_filter": ACLResourcePatternType.LITERAL}, [READ_ORDERS, DENY_ALL]),
    ({"pattern_type_filter": ACLResourcePatternType.PREFIXED}, [WRITE_PAY]),
    ({"principal_filter": "User:bob"}, [READ_ORDERS, WRITE_PAY]),
    ({"principal_filter": "Group:ops"}, []),  # a principal type lakelog never stores
    ({"host_filter": "*"}, ACLS),
    ({"host_filter": "10.0.0.1"}, []),  # lakelog's ACLs are all host *
    ({"operation": ACLOperation.WRITE}, [WRITE_PAY]),
    ({"operation": ACLOperation.DESCRIBE_CONFIGS}, []),
    ({"permission_type": ACLPermissionType.DENY}, [DENY_ALL]),
])
def test_filters(changes: dict, expected: list[Acl]) -> None:
    chosen = to_filter(kafka_filter(**changes))
    assert [a for a in ACLS if chosen.matches(a)] == expected


def test_an_unknown_filter_value_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="UNKNOWN"):
        to_filter(kafka_filter(operation=ACLOperation.UNKNOWN))


def test_described_groups_acls_by_resource_pattern() -> None:
    also = Acl("carol", "topic", "literal", "orders", "write", "deny")
    resources = described([READ_ORDERS, also, WRITE_PAY])
    assert [(r.resource_name, r.pattern_type, len(r.acls)) for r in resources] == [
        ("orders", ACLResourcePatternType.LITERAL, 2), ("pay", ACLResourcePatternType.PREFIXED, 1)]
    assert {a.principal for a in resources[0].acls} == {"User:bob", "User:carol"}
