"""DescribeAcls, CreateAcls and DeleteAcls (APIs 29, 30, 31) on lakelog's ACLs (`platform/acl.py`).

The same ACLs as `/v1/acls`, managed by the same principals (the admin principals; everyone while
authentication is off), refused otherwise with CLUSTER_AUTHORIZATION_FAILED. Kafka's ACL binding maps
onto lakelog's one to one where lakelog has the concept:

- principal `User:<name>` is lakelog's principal `<name>` (`User:*`: everyone);
- resource types TOPIC, GROUP, CLUSTER (named `kafka-cluster`); patterns LITERAL and PREFIXED;
- operations ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE; permissions ALLOW and DENY;
- host `*` only: lakelog's ACLs apply from every host.

A creation outside that (a TRANSACTIONAL_ID resource, DESCRIBE_CONFIGS, a host, another principal type)
is refused on its own with INVALID_REQUEST and a message naming what lakelog lacks. A filter asking for
such a binding matches nothing, since lakelog stores none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeAlias

from kafka.protocol.admin import (
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ACLResourceType,
    CreateAclsResponse,
    DeleteAclsResponse,
    DescribeAclsResponse,
)

from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import error_code, error_message
from lakelog.kafka_api.protocol import Call
from lakelog.kafka_api.threads import blocking
from lakelog.platform.acl import Acl, AclStore, ClusterAuthorizationFailed
from lakelog.platform.errors import InvalidRequest, LakelogError

Created: TypeAlias = CreateAclsResponse.AclCreationResult
Described: TypeAlias = DescribeAclsResponse.DescribeAclsResource
Description: TypeAlias = DescribeAclsResponse.DescribeAclsResource.AclDescription
FilterResult: TypeAlias = DeleteAclsResponse.DeleteAclsFilterResult
Matching: TypeAlias = DeleteAclsResponse.DeleteAclsFilterResult.DeleteAclsMatchingAcl

RESOURCE_TYPES = {ACLResourceType.TOPIC: "topic", ACLResourceType.GROUP: "group", ACLResourceType.CLUSTER: "cluster"}
PATTERN_TYPES = {ACLResourcePatternType.LITERAL: "literal", ACLResourcePatternType.PREFIXED: "prefixed"}
OPERATIONS = {ACLOperation.ALL: "all", ACLOperation.READ: "read", ACLOperation.WRITE: "write",
              ACLOperation.CREATE: "create", ACLOperation.DELETE: "delete", ACLOperation.ALTER: "alter",
              ACLOperation.DESCRIBE: "describe"}
PERMISSIONS = {ACLPermissionType.DENY: "deny", ACLPermissionType.ALLOW: "allow"}
USER = "User:"
ANY_HOST = "*"


class SecurityDisabled(LakelogError):
    code = "SECURITY_DISABLED"


# ---- translation (pure) ------------------------------------------------------------------------------


def _name(enum: type[IntEnum], value: int) -> str:
    try:
        return enum(value).name
    except ValueError:
        return str(value)


def _mapped(table: Mapping[int, str], value: int, what: str, enum: type[IntEnum]) -> str:
    if value in table:
        return table[value]
    served = ", ".join(_name(enum, k) for k in table)
    raise InvalidRequest(f"{what} {_name(enum, value)} has no lakelog counterpart (lakelog's ACLs have {served})")


def _principal(principal: str) -> str:
    kind, _, name = principal.partition(":")
    if f"{kind}:" != USER or not name:
        raise InvalidRequest(f"principal {principal!r} is not supported: lakelog's principals are users, "
                             f"written {USER}<name> ({USER}* for everyone)")
    return name


def to_acl(creation: Any) -> Acl:
    """lakelog's ACL for a CreateAcls creation; InvalidRequest naming what does not map."""
    if creation.host != ANY_HOST:
        raise InvalidRequest(f"host {creation.host!r} is not supported: lakelog's ACLs apply from every host "
                             f"(give {ANY_HOST!r})")
    return Acl(principal=_principal(creation.principal),
               resource_type=_mapped(RESOURCE_TYPES, creation.resource_type, "resource type", ACLResourceType),
               pattern_type=_mapped(PATTERN_TYPES, creation.resource_pattern_type, "pattern type",
                                    ACLResourcePatternType),
               resource_name=creation.resource_name,
               operation=_mapped(OPERATIONS, creation.operation, "operation", ACLOperation),
               permission=_mapped(PERMISSIONS, creation.permission_type, "permission", ACLPermissionType)).validate()


def kafka_binding(acl: Acl) -> dict[str, Any]:
    """The fields of Kafka's binding of a lakelog ACL."""
    return {"resource_type": _number(RESOURCE_TYPES, acl.resource_type), "resource_name": acl.resource_name,
            "pattern_type": _number(PATTERN_TYPES, acl.pattern_type), "principal": f"{USER}{acl.principal}",
            "host": ANY_HOST, "operation": _number(OPERATIONS, acl.operation),
            "permission_type": _number(PERMISSIONS, acl.permission)}


def _number(table: Mapping[int, str], value: str) -> int:
    return int(next(k for k, v in table.items() if v == value))


@dataclass(frozen=True)
class Filter:
    """A Kafka ACL binding filter over lakelog's ACLs; None fields match anything."""

    resource_type: str | None
    resource_name: str | None
    pattern: int  # ANY, MATCH, LITERAL or PREFIXED
    principal: str | None
    operation: str | None
    permission: str | None
    nothing: bool = False  # asks for a binding lakelog never stores (another host, a Kafka-only operation)

    def matches(self, acl: Acl) -> bool:
        if self.nothing or acl.resource_type not in RESOURCE_TYPES.values():  # a schema registry subject's
            return False
        fields = (("resource_type", self.resource_type), ("principal", self.principal),
                  ("operation", self.operation), ("permission", self.permission))
        if any(want is not None and getattr(acl, name) != want for name, want in fields):
            return False
        return self._pattern_matches(acl)

    def _pattern_matches(self, acl: Acl) -> bool:
        if self.pattern == ACLResourcePatternType.MATCH:  # every ACL that applies to the named resource
            return self.resource_name is None or acl.matches_resource(acl.resource_type, self.resource_name)
        if self.pattern != ACLResourcePatternType.ANY and acl.pattern_type != PATTERN_TYPES[self.pattern]:
            return False
        return self.resource_name is None or acl.resource_name == self.resource_name


def to_filter(kafka_filter: Any) -> Filter:
    """A DescribeAcls request or a DeleteAcls filter as a Filter; InvalidRequest for UNKNOWN values."""
    values = {"resource type": kafka_filter.resource_type_filter, "pattern type": kafka_filter.pattern_type_filter,
              "operation": kafka_filter.operation, "permission": kafka_filter.permission_type}
    unknown = [what for what, value in values.items() if value == 0]
    if unknown:
        raise InvalidRequest(f"a filter's {unknown[0]} is UNKNOWN (0): give ANY (1) or a value")
    pattern = kafka_filter.pattern_type_filter
    if pattern not in (ACLResourcePatternType.ANY, ACLResourcePatternType.MATCH, *PATTERN_TYPES):
        raise InvalidRequest(f"pattern type filter {pattern} is not one of ANY, MATCH, LITERAL, PREFIXED")
    chosen = {"resource_type": (kafka_filter.resource_type_filter, RESOURCE_TYPES),
              "operation": (kafka_filter.operation, OPERATIONS), "permission": (kafka_filter.permission_type,
                                                                                PERMISSIONS)}
    fields = {name: None if value == 1 else table.get(value) for name, (value, table) in chosen.items()}
    nothing = any(value != 1 and value not in table for value, table in chosen.values())
    principal = kafka_filter.principal_filter
    if principal is not None:
        kind, _, name = principal.partition(":")
        nothing |= f"{kind}:" != USER
        principal = name
    nothing |= kafka_filter.host_filter not in (None, ANY_HOST)
    return Filter(fields["resource_type"], kafka_filter.resource_name_filter, pattern, principal,
                  fields["operation"], fields["permission"], nothing)


def described(acls: Iterable[Acl]) -> list[Described]:
    """ACLs grouped by resource pattern, as DescribeAcls answers them."""
    resources: dict[tuple[int, str, int], list[Description]] = {}
    for acl in acls:
        binding = kafka_binding(acl)
        key = (binding["resource_type"], binding["resource_name"], binding["pattern_type"])
        resources.setdefault(key, []).append(Description(principal=binding["principal"], host=binding["host"],
                                                         operation=binding["operation"],
                                                         permission_type=binding["permission_type"]))
    return [Described(resource_type=t, resource_name=n, pattern_type=p, acls=found)
            for (t, n, p), found in sorted(resources.items())]


# ---- the APIs ----------------------------------------------------------------------------------------


def _store(context: Context) -> AclStore:
    """The ACL store, for a caller allowed to manage ACLs."""
    authorizer = context.services.authorizer
    if not authorizer.is_super(context.principal):
        raise ClusterAuthorizationFailed(f"principal {context.principal!r} may not manage ACLs (admin principals "
                                         "only)")
    if authorizer.store is None:
        raise SecurityDisabled("this node keeps no ACLs")
    return authorizer.store


async def describe_acls(context: Context, call: Call) -> DescribeAclsResponse:
    try:
        store, chosen = _store(context), to_filter(call.body)
    except Exception as exc:
        return DescribeAclsResponse(throttle_time_ms=0, error_code=error_code(exc), error_message=error_message(exc),
                                    resources=[])
    return DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                resources=described(a for a in store.list() if chosen.matches(a)))


async def create_acls(context: Context, call: Call) -> CreateAclsResponse:
    creations = call.body.creations
    try:
        store = _store(context)
    except Exception as exc:
        return CreateAclsResponse(throttle_time_ms=0, results=[_created(exc) for _ in creations])
    outcomes: list[Acl | Exception] = []
    for creation in creations:
        try:
            outcomes.append(to_acl(creation))
        except Exception as exc:
            outcomes.append(exc)
    valid = [o for o in outcomes if isinstance(o, Acl)]
    try:
        if valid:
            await blocking(store.add, valid)
    except Exception as exc:  # the write failed: none of them was added
        outcomes = [exc if isinstance(o, Acl) else o for o in outcomes]
    return CreateAclsResponse(throttle_time_ms=0, results=[_created(o if isinstance(o, Exception) else None)
                                                           for o in outcomes])


def _created(error: Exception | None) -> Created:
    if error is None:
        return Created(error_code=0, error_message=None)
    return Created(error_code=error_code(error), error_message=error_message(error))


async def delete_acls(context: Context, call: Call) -> DeleteAclsResponse:
    filters = call.body.filters
    try:
        store = _store(context)
        chosen: list[Filter | Exception] = []
        for kafka_filter in filters:
            try:
                chosen.append(to_filter(kafka_filter))
            except InvalidRequest as exc:
                chosen.append(exc)
        present = store.list()
        matched = [[a for a in present if f.matches(a)] if isinstance(f, Filter) else f for f in chosen]
        await blocking(store.remove, {a for found in matched if isinstance(found, list) for a in found})
    except Exception as exc:
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[_filter_result(exc) for _ in filters])
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[_filter_result(found) for found in matched])


def _filter_result(found: list[Acl] | Exception) -> FilterResult:
    if isinstance(found, Exception):
        return FilterResult(error_code=error_code(found), error_message=error_message(found), matching_acls=[])
    return FilterResult(error_code=0, error_message=None,
                        matching_acls=[Matching(error_code=0, error_message=None, **kafka_binding(a)) for a in found])

