"""Confluent's schema registry API at its own paths (no prefix): translation only, the model is
`lakelog.platform.schema_registry`. Bodies are read as JSON whatever their Content-Type
(`application/vnd.schemaregistry.v1+json` or `application/json`); answers are the former. ACLs: reading a
subject needs describe on it, registering write, deleting delete; the global config and mode need alter on
the cluster, a subject's config alter on the subject."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from lakelog.ingest_api.auth import Principal, Svc
from lakelog.ingest_api.dependencies import Services, blocking
from lakelog.ingest_api.errors import REGISTRY_MEDIA_TYPE, MalformedRequest
from lakelog.platform.acl import CLUSTER
from lakelog.platform.schema_registry import schema_fields
from lakelog.platform.schema_registry.compatibility import SCHEMA_TYPES
from lakelog.platform.schema_registry.errors import InvalidSchema

router = APIRouter(tags=["schema registry"], include_in_schema=False)


def answer(body: Any) -> Response:
    return Response(orjson.dumps(body), media_type=REGISTRY_MEDIA_TYPE)


async def json_body(request: Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.body() or b"{}")
    except orjson.JSONDecodeError as exc:
        raise MalformedRequest(f"malformed JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidSchema("the body must be a JSON object")
    return body


def flag(value: str | None) -> bool:
    return value is not None and value.lower() == "true"


def check(services: Services, principal: str, operation: str, subject: str) -> None:
    services.authorizer.check(principal, operation, "subject", subject)


def schema_args(body: dict[str, Any]) -> tuple[Any, Any, Any]:
    return body.get("schema"), body.get("schemaType"), body.get("references")


@router.get("/schemas/types")
async def schema_types(services: Svc, principal: Principal) -> Response:
    return answer(list(SCHEMA_TYPES))


@router.get("/schemas/ids/{schema_id}")
async def schema_by_id(schema_id: int, services: Svc, principal: Principal, subject: str | None = None,
                       format: str | None = None) -> Response:  # noqa: A002 (Confluent's name)
    stored = await blocking(services.schema_registry().schema, schema_id)
    fields = schema_fields(stored)
    if format:
        fields["schema"] = await blocking(services.schema_registry().schema_text, schema_id, format)
    return answer(fields)


@router.get("/schemas/ids/{schema_id}/schema")
async def raw_schema_by_id(schema_id: int, services: Svc, principal: Principal) -> Response:
    stored = await blocking(services.schema_registry().schema, schema_id)
    return Response(stored.schema.encode(), media_type=REGISTRY_MEDIA_TYPE)


@router.get("/schemas/ids/{schema_id}/subjects")
async def subjects_of_id(schema_id: int, services: Svc, principal: Principal, deleted: str | None = None) -> Response:
    uses = await blocking(services.schema_registry().uses_of, schema_id, flag(deleted))
    allowed = services.authorizer.allowed
    return answer(sorted({s for s, _ in uses if allowed(principal, "describe", "subject", s)}))


@router.get("/schemas/ids/{schema_id}/versions")
async def versions_of_id(schema_id: int, services: Svc, principal: Principal, deleted: str | None = None) -> Response:
    uses = await blocking(services.schema_registry().uses_of, schema_id, flag(deleted))
    allowed = services.authorizer.allowed
    return answer([{"subject": s, "version": v} for s, v in uses if allowed(principal, "describe", "subject", s)])


@router.get("/subjects")
async def list_subjects(services: Svc, principal: Principal, deleted: str | None = None,
                        subjectPrefix: str = "") -> Response:  # noqa: N803 (Confluent's name)
    subjects = await blocking(services.schema_registry().subjects, flag(deleted), subjectPrefix)
    allowed = services.authorizer.allowed
    return answer([s for s in subjects if allowed(principal, "describe", "subject", s)])


@router.post("/subjects/{subject:path}/versions")
async def register(subject: str, request: Request, services: Svc, principal: Principal) -> Response:
    check(services, principal, "write", subject)
    body = await json_body(request)
    schema_id = await blocking(services.schema_registry().register, subject, *schema_args(body))
    return answer({"id": schema_id})


@router.post("/subjects/{subject:path}")
async def lookup(subject: str, request: Request, services: Svc, principal: Principal,
                 deleted: str | None = None) -> Response:
    check(services, principal, "describe", subject)
    body = await json_body(request)
    found = await blocking(services.schema_registry().lookup, subject, *schema_args(body), deleted=flag(deleted))
    return answer(found)


@router.get("/subjects/{subject:path}/versions")
async def list_versions(subject: str, services: Svc, principal: Principal, deleted: str | None = None) -> Response:
    check(services, principal, "describe", subject)
    return answer(await blocking(services.schema_registry().versions, subject, flag(deleted)))


@router.get("/subjects/{subject:path}/versions/{version}")
async def get_version(subject: str, version: str, services: Svc, principal: Principal,
                      deleted: str | None = None, format: str | None = None) -> Response:  # noqa: A002
    check(services, principal, "describe", subject)
    found = await blocking(services.schema_registry().version, subject, version, flag(deleted))
    if format:
        found["schema"] = await blocking(services.schema_registry().schema_text, found["id"], format)
    return answer(found)


@router.get("/subjects/{subject:path}/versions/{version}/schema")
async def get_version_schema(subject: str, version: str, services: Svc, principal: Principal) -> Response:
    check(services, principal, "describe", subject)
    found = await blocking(services.schema_registry().version, subject, version)
    return Response(found["schema"].encode(), media_type=REGISTRY_MEDIA_TYPE)


# `{subject:path}`: a subject may hold "/" (Protobuf references are named by file); this route before the next
@router.delete("/subjects/{subject:path}/versions/{version}")
async def delete_version(subject: str, version: str, services: Svc, principal: Principal,
                         permanent: str | None = None) -> Response:
    check(services, principal, "delete", subject)
    return answer(await blocking(services.schema_registry().delete_version, subject, version, flag(permanent)))


@router.delete("/subjects/{subject:path}")
async def delete_subject(subject: str, services: Svc, principal: Principal, permanent: str | None = None) -> Response:
    check(services, principal, "delete", subject)
    return answer(await blocking(services.schema_registry().delete_subject, subject, flag(permanent)))


async def _compatibility(subject: str, version: str | None, request: Request, services: Services,
                         principal: str, verbose: str | None) -> Response:
    check(services, principal, "describe", subject)
    body = await json_body(request)
    messages = await blocking(services.schema_registry().compatibility, subject, *schema_args(body),
                              version=version)
    return answer({"is_compatible": not messages, **({"messages": messages} if flag(verbose) else {})})


@router.post("/compatibility/subjects/{subject:path}/versions/{version}")
async def compatibility_with(subject: str, version: str, request: Request, services: Svc, principal: Principal,
                             verbose: str | None = None) -> Response:
    return await _compatibility(subject, version, request, services, principal, verbose)


@router.post("/compatibility/subjects/{subject:path}/versions")
async def compatibility_with_all(subject: str, request: Request, services: Svc, principal: Principal,
                                 verbose: str | None = None) -> Response:
    return await _compatibility(subject, None, request, services, principal, verbose)


@router.get("/config")
async def get_config(services: Svc, principal: Principal) -> Response:
    return answer({"compatibilityLevel": await blocking(services.schema_registry().level)})


@router.put("/config")
async def put_config(request: Request, services: Svc, principal: Principal) -> Response:
    services.authorizer.check(principal, "alter", "cluster", CLUSTER)
    body = await json_body(request)
    return answer({"compatibility": await blocking(services.schema_registry().set_level, body.get("compatibility"))})


@router.get("/config/{subject:path}")
async def get_subject_config(subject: str, services: Svc, principal: Principal,
                             defaultToGlobal: str | None = None) -> Response:  # noqa: N803 (Confluent's name)
    check(services, principal, "describe", subject)
    level = await blocking(services.schema_registry().level, subject, flag(defaultToGlobal))
    return answer({"compatibilityLevel": level})


@router.put("/config/{subject:path}")
async def put_subject_config(subject: str, request: Request, services: Svc, principal: Principal) -> Response:
    check(services, principal, "alter", subject)
    body = await json_body(request)
    level = await blocking(services.schema_registry().set_level, body.get("compatibility"), subject)
    return answer({"compatibility": level})


@router.delete("/config/{subject:path}")
async def delete_subject_config(subject: str, services: Svc, principal: Principal) -> Response:
    check(services, principal, "alter", subject)
    return answer({"compatibilityLevel": await blocking(services.schema_registry().delete_level, subject)})


@router.get("/mode")
async def get_mode(services: Svc, principal: Principal) -> Response:
    return answer({"mode": await blocking(services.schema_registry().mode)})


@router.put("/mode")
async def put_mode(request: Request, services: Svc, principal: Principal) -> Response:
    services.authorizer.check(principal, "alter", "cluster", CLUSTER)
    body = await json_body(request)
    return answer({"mode": await blocking(services.schema_registry().set_mode, body.get("mode"))})
