"""Produce without FastAPI's per-request machinery.

At thousands of single-record requests per second, FastAPI's and Starlette's layers (telemetry and body
limit checks, the error middleware, routing, dependency solving, Request and Response objects) cost more
of the event loop than the produce itself. The app (`app.LakelogApp`) hands `POST /v1/topics/{topic}/records`
to this raw ASGI handler before any of them: it reads the few headers and the body from the ASGI messages,
calls the handler the FastAPI route calls (`routes.records.produce_call`: the same authentication, checks,
back-pressure and metrics) and answers errors through `errors.response_for` (one error mapping, counted
as the app's handlers count them). A path it does not recognise exactly goes on to FastAPI.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.datastructures import QueryParams
from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive, Scope, Send

from lakelog.ingest_api import errors
from lakelog.ingest_api.dependencies import Services, collect_reserved, reserve_declared, services_in, whole_body
from lakelog.ingest_api.routes import records

PREFIX, SUFFIX = "/v1/topics/", "/records"
MAX_TOPIC = 249
# The request headers the produce path reads (by lower-case name, as ASGI gives them).
READ_HEADERS = frozenset({b"authorization", b"content-type", b"content-length", b"idempotency-key"})
NO_QUERY: dict[str, str] = {}
JSON_HEADERS = (b"content-type", b"application/json")


def produce_topic(scope: Scope) -> str | None:
    """The topic of a produce request (`POST /v1/topics/{topic}/records`), None for any other request."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    path: str = scope["path"]
    if not (path.startswith(PREFIX) and path.endswith(SUFFIX)):
        return None
    topic = path[len(PREFIX):-len(SUFFIX)]
    return topic if 0 < len(topic) <= MAX_TOPIC and "/" not in topic else None


def read_headers(scope: Scope) -> dict[str, str]:
    """The headers produce reads, the first of each name (as Starlette's `Headers.get`)."""
    found: dict[str, str] = {}
    for name, value in scope["headers"]:
        if name in READ_HEADERS:
            found.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    return found


async def read_body(receive: Receive, declared: str | None, services: Services) -> bytes:
    """The body, as `dependencies.read_body` reads it (its declared length reserved before a byte is read);
    one that came in one message (a small one, commonly) is taken without a stream of chunks."""
    reserved = reserve_declared(declared, services)
    try:
        message = await receive()
    except BaseException:
        services.release(reserved)
        raise
    if message["type"] == "http.request" and not message.get("more_body", False):
        return whole_body(message.get("body", b""), reserved, services)
    return await collect_reserved(body_chunks(receive, message), reserved, services)


async def body_chunks(receive: Receive, message: Message | None = None) -> AsyncIterator[bytes]:
    """The body's chunks as they arrive, from `message` (received already) on (as Starlette's
    `Request.stream`)."""
    while True:
        if message is None:
            message = await receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                return
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()
        message = None


async def send_json(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), JSON_HEADERS]})
    await send({"type": "http.response.body", "body": body})


class ProduceFastPath:
    def __init__(self, state: Any, on_error: Callable[[str], None]) -> None:
        """`state`: the app's state (its services); `on_error(code)` counts an error answer."""
        self.state = state
        self.on_error = on_error

    async def __call__(self, topic: str, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            services = services_in(self.state)
            headers = read_headers(scope)
            raw_query = scope["query_string"]
            query = QueryParams(raw_query) if raw_query else NO_QUERY
            payload = await records.produce_call(
                services, topic, query, headers,
                lambda: read_body(receive, headers.get("content-length"), services))
        except Exception as exc:
            response, code = errors.response_for(exc)
            self.on_error(code)
            await response(scope, receive, send)
            return
        await send_json(send, 200, orjson.dumps(payload))
