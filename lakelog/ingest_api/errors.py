"""Every error the HTTP tier answers, mapped in this one place.

The body is always `{"error_code", "message", "retriable"}` with Kafka's error
name where one fits; 503 answers carry `Retry-After`. The schema registry's paths (Confluent's API) answer
in Confluent's shape instead, `{"error_code": <int>, "message"}`, which its clients read (`registry_response`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from lakelog.platform import acl
from lakelog.platform import errors as core
from lakelog.platform.cluster import errors as cluster
from lakelog.platform.groups import errors as groups
from lakelog.platform.schema_registry import errors as registry
from lakelog.platform.share import errors as shares

log = logging.getLogger(__name__)

RETRY_AFTER_S = "1"


class MalformedRequest(core.LakelogError):
    """The body is not valid JSON, NDJSON, Arrow IPC or base64."""

    code = "INVALID_REQUEST"


class SchemaViolation(core.LakelogError):
    """Well-formed, but not the shape the endpoint takes (unknown field, wrong type, bad value)."""

    code = "INVALID_REQUEST"


class BodyTooLarge(core.LakelogError):
    code = "RECORD_LIST_TOO_LARGE"


class UnsupportedMediaType(core.LakelogError):
    code = "INVALID_REQUEST"


class Throttled(core.LakelogError):
    code = "THROTTLING_QUOTA_EXCEEDED"
    retriable = True


class ShuttingDown(core.LakelogError):
    code = "BROKER_NOT_AVAILABLE"
    retriable = True


# Most specific first: the first class the error is an instance of decides.
STATUS: list[tuple[type[core.LakelogError], int]] = [
    (MalformedRequest, 400),
    (SchemaViolation, 422),
    (UnsupportedMediaType, 415),
    (BodyTooLarge, 413),
    (core.RecordTooLarge, 413),
    (Throttled, 429),
    (acl.AuthenticationFailed, 401),
    (acl.TopicAuthorizationFailed, 403),
    (acl.GroupAuthorizationFailed, 403),
    (acl.ClusterAuthorizationFailed, 403),
    (acl.SubjectAuthorizationFailed, 403),
    (cluster.ClusterAuthFailed, 403),
    (cluster.ForwardedObjectMismatch, 422),
    (core.UnknownTopicOrPartition, 404),
    (groups.UnknownMemberId, 404),
    (groups.GroupIdNotFound, 404),
    (core.TopicAlreadyExists, 409),
    (core.OffsetOutOfRange, 409),
    (core.OutOfOrderSequence, 409),
    (core.DuplicateSequence, 409),
    (core.IdempotencyKeyReused, 409),
    (core.InvalidProducerEpoch, 409),
    (core.DataChangedOutside, 409),
    (groups.IllegalGeneration, 409),
    (groups.FencedInstanceId, 409),
    (groups.NonEmptyGroup, 409),
    (groups.InconsistentGroupProtocol, 409),
    (groups.NoOffsetForPartition, 409),
    (shares.InvalidRecordState, 409),
    (shares.FencedMemberEpoch, 409),
    (shares.InvalidShareSessionEpoch, 409),
    (shares.GroupNotEmpty, 409),
    (shares.ShareSessionNotFound, 404),
    (core.InvalidTopic, 422),
    (core.InvalidPartitions, 422),
    (core.InvalidConfig, 422),
    (core.InvalidRecord, 422),
    (core.InvalidTimestamp, 422),
    (core.InvalidRequest, 422),
    (groups.InvalidSessionTimeout, 422),
    (groups.InvalidGroupId, 422),
    (core.StorageWriteFailed, 500),
    (core.RequestTimedOut, 503),
    (core.StorageUnavailable, 503),
    (core.NotEnoughReplicas, 503),
    (core.BrokerClosed, 503),
    (cluster.NotInCluster, 503),
    (cluster.NodeUnavailable, 503),
    (cluster.NotLeader, 503),
    (cluster.NotCoordinator, 503),
    (ShuttingDown, 503),
]


def status_of(error: core.LakelogError) -> int:
    if isinstance(error, registry.RegistryError):
        return error.status
    for kind, status in STATUS:
        if isinstance(error, kind):
            return status
    return 503 if error.retriable else 500


def error_response(status: int, code: str, message: str, retriable: bool, **extra: Any) -> Response:
    headers = {}
    if status == 503 or status == 429:
        headers["Retry-After"] = RETRY_AFTER_S
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    body = {"error_code": code, "message": message, "retriable": retriable, **extra}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def lakelog_error_response(error: core.LakelogError) -> Response:
    extra: dict[str, Any] = {}
    if isinstance(error, core.OffsetOutOfRange):
        extra = {"log_start_offset": error.log_start_offset, "log_end_offset": error.log_end_offset}
    elif isinstance(error, core.RecordsRefused):
        extra = {"record_errors": [{"index": index, "message": message} for index, message in error.record_errors]}
    status = status_of(error)
    return error_response(status, error.code, error.message, error.retriable or status == 503, **extra)


def validation_message(exc: RequestValidationError) -> tuple[int, str]:
    """Malformed JSON is a 400; anything else pydantic refuses is a 422."""
    problems = []
    for error in exc.errors()[:5]:
        if error.get("type") == "json_invalid":
            return 400, f"malformed JSON: {error.get('ctx', {}).get('error', error.get('msg'))}"
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        problems.append(f"{where or 'body'}: {error.get('msg')}")
    return 422, "; ".join(problems) or "invalid request"


def response_for(exc: Exception) -> tuple[Response, str]:
    """The one mapping of errors to HTTP answers, and the error code each is counted under."""
    if isinstance(exc, core.LakelogError):
        return lakelog_error_response(exc), exc.code
    if isinstance(exc, RequestValidationError):
        status, message = validation_message(exc)
        return error_response(status, "INVALID_REQUEST", message, False), "INVALID_REQUEST"
    if isinstance(exc, StarletteHTTPException):
        code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "INVALID_REQUEST")
        return error_response(exc.status_code, code, str(exc.detail), False), code
    log.exception("unexpected error", exc_info=exc)
    return (error_response(500, "UNKNOWN_SERVER_ERROR", f"unexpected error: {type(exc).__name__}", False),
            "UNKNOWN_SERVER_ERROR")


REGISTRY_ROOTS = frozenset({"subjects", "schemas", "compatibility", "config", "mode"})
REGISTRY_MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
# Confluent's error codes for the errors that are not the registry's own
REGISTRY_CODES = {401: 40101, 403: 40301, 500: 50001, 503: 50003}


def is_registry_path(path: str) -> bool:
    return path.split("/", 2)[1] in REGISTRY_ROOTS if path.startswith("/") else False


def registry_response(exc: Exception) -> tuple[Response, str]:
    """An error on a schema registry path, in Confluent's shape (its clients read the numeric code)."""
    response, code = response_for(exc)
    if isinstance(exc, registry.RegistryError):
        error_code, message = exc.error_code, exc.message
    else:
        error_code = REGISTRY_CODES.get(response.status_code, response.status_code)
        message = orjson.loads(response.body).get("message", "")
    body = orjson.dumps({"error_code": error_code, "message": message})
    headers = {k: v for k, v in response.headers.items() if k.lower() in ("retry-after", "www-authenticate")}
    return Response(body, status_code=response.status_code, media_type=REGISTRY_MEDIA_TYPE, headers=headers), code


def install(app: FastAPI, on_error: Callable[[str], None] | None = None) -> None:
    """Register `response_for` as the handler of every error; `on_error(code)` counts errors by code."""

    async def handle(request: Request, exc: Exception) -> Response:
        response, code = registry_response(exc) if is_registry_path(request.url.path) else response_for(exc)
        if on_error is not None:
            on_error(code)
        return response

    for kind in (core.LakelogError, RequestValidationError, StarletteHTTPException, Exception):
        app.add_exception_handler(kind, handle)
