"""The OpenAPI document: generated routes, plus the error answers each operation really gives, in the
shape `errors.py` sends (`ErrorResponse`), with an example each."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from lakelog.ingest_api.models import ErrorResponse, ProduceRequest

ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}

# status -> (description, example error_code, example message, retriable)
ERRORS: dict[int, tuple[str, str, str, bool]] = {
    400: ("Malformed body (not JSON, NDJSON, Arrow IPC or base64)", "INVALID_REQUEST",
          "malformed JSON: unexpected character", False),
    401: ("No or unknown API key (when authentication is on)", "SASL_AUTHENTICATION_FAILED",
          "missing or unknown API key", False),
    403: ("The caller's ACLs do not allow this (when authentication is on)", "TOPIC_AUTHORIZATION_FAILED",
          "principal 'alice' may not write topic 'orders'", False),
    404: ("Unknown topic, partition, group or member", "UNKNOWN_TOPIC_OR_PARTITION", "unknown topic 'orders'",
          False),
    409: ("Conflicts with the current state", "TOPIC_ALREADY_EXISTS", "topic 'orders' already exists", False),
    413: ("Body or record too large", "RECORD_LIST_TOO_LARGE",
          "the request body is over the limit (max_request_bytes) of 67108864 bytes", False),
    415: ("Unsupported Content-Type", "INVALID_REQUEST", "unsupported content type 'text/csv'", False),
    422: ("Well-formed, but not a valid request", "INVALID_REQUEST", "partitions: Input should be an integer",
          False),
    429: ("Too many produce bytes in flight; retry after Retry-After seconds", "THROTTLING_QUOTA_EXCEEDED",
          "268435456 bytes of produce requests are in flight; retry", True),
    503: ("Storage unreachable, request timed out or server shutting down; retry after Retry-After seconds",
          "KAFKA_STORAGE_ERROR", "cannot use root s3://bucket/lakelog: endpoint https://s3.example is unreachable",
          True),
}

# The conflicts (409) each operation can answer, by its most common error code.
CONFLICTS: dict[tuple[str, str], str] = {
    ("post", "/v1/topics"): "TOPIC_ALREADY_EXISTS",
    ("post", "/v1/topics/{topic}/records"): "OUT_OF_ORDER_SEQUENCE_NUMBER",
    ("get", "/v1/topics/{topic}/partitions/{partition}/records"): "OFFSET_OUT_OF_RANGE",
    ("post", "/v1/groups/{group}/members"): "INCONSISTENT_GROUP_PROTOCOL",
    ("post", "/v1/groups/{group}/members/{member}/heartbeat"): "ILLEGAL_GENERATION",
    ("get", "/v1/groups/{group}/members/{member}/records"): "ILLEGAL_GENERATION",
    ("post", "/v1/groups/{group}/offsets"): "ILLEGAL_GENERATION",
    ("post", "/v1/groups/{group}/offsets/reset"): "NON_EMPTY_GROUP",
    ("delete", "/v1/groups/{group}"): "NON_EMPTY_GROUP",
    ("post", "/v1/share-groups/{group}/members/{member}/heartbeat"): "FENCED_MEMBER_EPOCH",
    ("delete", "/v1/share-groups/{group}"): "NON_EMPTY_GROUP",
}
PRODUCE = ("post", "/v1/topics/{topic}/records")


def error_statuses(method: str, path: str, operation: dict[str, Any]) -> list[int]:
    """The error statuses the server answers for one operation."""
    if path == "/healthz":
        return []
    if path == "/readyz":
        return [503]
    statuses = {401, 403, 503}
    if operation.get("parameters") or "requestBody" in operation:
        statuses.add(422)
    if "requestBody" in operation:
        statuses.add(400)
    if "{topic}" in path or "{group}" in path:
        statuses.add(404)
    if (method, path) in CONFLICTS:
        statuses.add(409)
    if (method, path) == PRODUCE:
        statuses |= {413, 415, 429}
    return sorted(statuses)


def error_response(status: int, method: str, path: str) -> dict[str, Any]:
    description, code, message, retriable = ERRORS[status]
    if status == 409:
        code = CONFLICTS[(method, path)]
        message = {"TOPIC_ALREADY_EXISTS": "topic 'orders' already exists",
                   "OFFSET_OUT_OF_RANGE": "offset 120 is out of range [0, 100)",
                   }.get(code, f"{code.lower().replace('_', ' ')}")
    example: dict[str, Any] = {"error_code": code, "message": message, "retriable": retriable}
    if code == "OFFSET_OUT_OF_RANGE":
        example |= {"log_start_offset": 0, "log_end_offset": 100}
    return {"description": description, "content": {"application/json": {"schema": ERROR_REF, "example": example}}}


def build(app: FastAPI) -> dict[str, Any]:
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    # The produce body is parsed in bulk, not by a pydantic parameter: its schema is added here.
    produce = ProduceRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(produce.pop("$defs", {}))
    components["ProduceRequest"] = produce
    components["ErrorResponse"] = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            for status in error_statuses(method, path, operation):
                responses[str(status)] = error_response(status, method, path)
    # FastAPI's own validation-error shapes are never sent (errors.py answers every error as ErrorResponse).
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    return schema
