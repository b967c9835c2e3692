"""ACL management (admin principals only), health, readiness and metrics."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from starlette.responses import Response

from lakelog.ingest_api.auth import Principal, Svc
from lakelog.ingest_api.dependencies import blocking
from lakelog.ingest_api.errors import SchemaViolation
from lakelog.ingest_api.models import AclCreate, AclList, AclModel, Health
from lakelog.ingest_api.routes.records import json_response
from lakelog.platform.acl import CLUSTER, Acl, AclFilter
from lakelog.platform.errors import StorageUnavailable
from lakelog.platform.storage import STORAGE_ERRORS, describe_storage_error

acl_router = APIRouter(prefix="/v1/acls", tags=["access control"])
ops_router = APIRouter(tags=["operations"])


def to_model(acl: Acl) -> AclModel:
    return AclModel(principal=acl.principal, resource_type=acl.resource_type,
                    pattern_type=acl.pattern_type, resource_name=acl.resource_name,
                    operation=acl.operation, permission=acl.permission)


def acl_filter(principal: str | None, resource_type: str | None, pattern_type: str | None,
               resource_name: str | None, operation: str | None, permission: str | None) -> AclFilter:
    return AclFilter(principal, resource_type, pattern_type, resource_name, operation, permission)


PrincipalQ = Annotated[str | None, Query(min_length=1, max_length=256)]
NameQ = Annotated[str | None, Query(min_length=1, max_length=249)]
ResourceQ = Literal["topic", "group", "cluster", "subject"] | None
PatternQ = Literal["literal", "prefixed"] | None
OperationQ = Literal["read", "write", "describe", "create", "delete", "alter", "all"] | None
PermissionQ = Literal["allow", "deny"] | None


@acl_router.get("", response_model=AclList, summary="List ACLs matching the filter")
async def list_acls(services: Svc, caller: Principal, principal: PrincipalQ = None, resource_type: ResourceQ = None,
                    pattern_type: PatternQ = None, resource_name: NameQ = None, operation: OperationQ = None,
                    permission: PermissionQ = None) -> AclList:
    services.authorizer.check_admin(caller)
    found = services.acls.list(acl_filter(principal, resource_type, pattern_type, resource_name, operation, permission))
    return AclList(acls=[to_model(a) for a in found])


@acl_router.post("", response_model=AclList, status_code=201, summary="Add ACLs")
async def add_acls(body: AclCreate, services: Svc, caller: Principal) -> AclList:
    services.authorizer.check_admin(caller)
    acls = [Acl(a.principal, a.resource_type, a.pattern_type, a.resource_name, a.operation, a.permission)
            for a in body.acls]
    added = await blocking(services.acls.add, acls)
    return AclList(acls=[to_model(a) for a in added])


@acl_router.delete("", response_model=AclList, summary="Delete the ACLs matching the filter (give at least one)")
async def delete_acls(services: Svc, caller: Principal, principal: PrincipalQ = None,
                      resource_type: ResourceQ = None, pattern_type: PatternQ = None, resource_name: NameQ = None,
                      operation: OperationQ = None, permission: PermissionQ = None) -> AclList:
    services.authorizer.check_admin(caller)
    chosen = acl_filter(principal, resource_type, pattern_type, resource_name, operation, permission)
    if chosen == AclFilter():
        raise SchemaViolation("give at least one filter (principal, resource_type, ...) to delete ACLs")
    removed = await blocking(services.acls.delete, chosen)
    return AclList(acls=[to_model(a) for a in removed])


@ops_router.get("/healthz", response_model=Health, summary="Liveness")
async def healthz() -> Health:
    return Health(status="ok")


@ops_router.get("/readyz", response_model=Health, summary="Readiness: storage reachable, not shutting down")
async def readyz(services: Svc) -> Response:
    if services.closing:
        return json_response({"error_code": "BROKER_NOT_AVAILABLE", "message": "shutting down", "retriable": True},
                             503)
    try:
        await blocking(services.broker.catalog.refresh)
    except STORAGE_ERRORS as exc:  # storage unreachable: not ready
        raise StorageUnavailable(describe_storage_error(services.broker.storage, exc)) from None
    return json_response({"status": "ready"})


@ops_router.get("/metrics", summary="Prometheus metrics (needs describe on the cluster when authentication is on)",
                response_class=Response, responses={200: {"content": {"text/plain": {}}}})
async def metrics(services: Svc, principal: Principal) -> Response:
    services.authorizer.check(principal, "describe", "cluster", CLUSTER)  # the metrics name topics and groups
    body = await blocking(services.metrics.render)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
