"""Requests only one node can answer go to it: this ASGI middleware relays any `/v1/groups/{group}...` or
`/v1/share-groups/{group}...` request that another node coordinates, and any `/v1/topics/{topic}/history`
request of a topic another node leads (only the leader samples it), as it came (the caller's API key
included: the owner authorizes it), and relays the answer back. The HTTP layer only relays; who owns what is
the platform's call (`Membership.view().owner`).

A relayed request carries `X-Lakelog-Forwarded` (and the cluster secret) and is never relayed again, so
two nodes with different views answer instead of bouncing the request between them.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lakelog.ingest_api import errors
from lakelog.ingest_api.group_paths import group_id
from lakelog.platform.cluster.errors import NodeUnavailable, NotCoordinator
from lakelog.platform.cluster.forwarding import FORWARDED_HEADER, SECRET_HEADER
from lakelog.platform.cluster.ownership import group_key, topic_key
from lakelog.platform.errors import LakelogError

GROUP_PATH = re.compile(r"/v1/(?:share-)?groups/([^/]+)(?:/.*)?")
TOPIC_HISTORY_PATH = re.compile(r"/v1/topics/([^/]+)/history")
RELAY_TIMEOUT = httpx.Timeout(connect=2.0, read=300.0, write=30.0, pool=30.0)  # joins and long polls wait
HOP_HEADERS = frozenset({"host", "content-length", "connection", "transfer-encoding", "keep-alive"})


def from_a_node(headers: Any, client_host: str | None, secret: str | None) -> bool:
    """A node-to-node request: it carries the cluster secret, or, with no secret set, comes from loopback."""
    if secret:
        given = headers.get(SECRET_HEADER.lower(), "")
        return hmac.compare_digest(given.encode(), secret.encode())
    try:
        return client_host is not None and ipaddress.ip_address(client_host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Owned:
    """A request one node answers: the key of its owner, who that is (for messages), and the group when it
    is a group's (the coordinator's checks apply)."""

    key: str
    owner: str
    group: str | None = None


def owned(path: str) -> Owned | None:
    if match := GROUP_PATH.fullmatch(path):  # the group's segment is still encoded (group_paths.py)
        group = group_id(match.group(1))
        return Owned(group_key(group), f"the coordinator of group {group!r}", group)
    if match := TOPIC_HISTORY_PATH.fullmatch(path):
        return Owned(topic_key(match.group(1)), f"the leader of topic {match.group(1)!r}")
    return None


class OwnerRouting:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._http: httpx.AsyncClient | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = owned(scope["path"]) if scope["type"] == "http" else None
        services = getattr(scope["app"].state, "services", None) if target is not None else None
        if target is None or services is None or services.broker.cluster is None:
            await self.app(scope, receive, send)
            return
        await self._route(scope, receive, send, target, services)

    async def _route(self, scope: Scope, receive: Receive, send: Send, target: Owned, services: Any) -> None:
        cluster, group = services.broker.cluster, target.group
        request = Request(scope, receive)
        body = await request.body()
        try:
            if group is not None and services.handing_over:
                raise NotCoordinator(f"this node is handing group {group!r} over to another: ask again")
            if self._relayed(scope, services):  # answered here, or refused: never relayed on
                view = cluster.view()
                if group is not None and not view.is_local(view.owner(target.key)):
                    raise NotCoordinator(f"this node does not coordinate group {group!r} yet: ask again")
                # A topic's history is answered by the node it was relayed to: views differ only while
                # leadership moves, and the new leader's history is then all there is.
                await self._serve_here(scope, send, body, services, group)
                return
            for _ in range(2):  # a refused connection never reached the owner: ask the next one
                view = cluster.view()
                owner = view.owner(target.key)
                if view.is_local(owner):
                    await self._serve_here(scope, send, body, services, group)
                    return
                try:
                    response = await self._relay(request, body, owner.address, services.settings.cluster_secret,
                                                 target.owner)
                    break
                except httpx.ConnectError:
                    cluster.suspect(owner.node_id)
            else:
                raise NodeUnavailable(f"{target.owner} is unreachable")
        except LakelogError as exc:
            response, _ = errors.response_for(exc)
        await response(scope, receive, send)

    async def _serve_here(self, scope: Scope, send: Send, body: bytes, services: Any, group: str | None) -> None:
        if group is not None and services.coordinator.taking_over(group):
            raise NotCoordinator(f"this node is taking group {group!r} over from another: ask again")
        await self.app(scope, _replay(body), send)

    @staticmethod
    def _relayed(scope: Scope, services: Any) -> bool:
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if FORWARDED_HEADER.lower() not in headers:
            return False
        client = scope.get("client")
        return from_a_node(headers, client[0] if client else None, services.settings.cluster_secret)

    async def _relay(self, request: Request, body: bytes, address: str, secret: str | None,
                     owner: str) -> Response:
        """The owner's answer; raises httpx.ConnectError when it could not be reached at all."""
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=RELAY_TIMEOUT, limits=httpx.Limits(max_connections=512))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        headers[FORWARDED_HEADER] = "1"
        if secret:
            headers[SECRET_HEADER] = secret
        url = address.rstrip("/") + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        try:
            answer = await self._http.request(request.method, url, content=body, headers=headers)
        except httpx.ConnectError:
            raise
        except httpx.HTTPError as exc:
            raise NodeUnavailable(f"{owner} ({address}) did not answer: {exc}") from None
        kept = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_HEADERS | {"content-encoding"}}
        return Response(answer.content, status_code=answer.status_code, headers=kept)


def _replay(body: bytes) -> Receive:
    """A `receive` that gives the body read already, for the app that serves the request here."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive
