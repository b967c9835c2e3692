"""A group id may hold any character, `/` too (as Kafka's may): in `/v1/groups/{group}...` (and in
`/v1/share-groups/{group}...`, share groups' paths) a client sends it
URL-encoded (`a%2Fb`), and the server decodes the path before routing, where `a/b` would be two segments.
This ASGI middleware puts the group's segment back as it came (still encoded) into the path routes match,
and the routes' `group` parameter decodes it (`routes/groups.py`, `GroupId`); so does the owner routing
(`cluster_routing.py`). The rest of the path is decoded as before.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from starlette.types import ASGIApp, Receive, Scope, Send

PREFIX = "/v1/groups/"
PREFIXES = (PREFIX, "/v1/share-groups/")


def encoded_group_path(path: str, raw_path: bytes | None) -> str:
    """`path` (decoded) with the group's segment as the client encoded it in `raw_path`; without a raw path
    (a server that gives none), the decoded segment up to the next `/`, encoded again."""
    prefix = next((p for p in PREFIXES if path.startswith(p)), None)
    if prefix is None:
        return path
    raw = raw_path.decode("ascii", "replace") if raw_path else ""
    if raw.startswith(prefix):
        segment, slash, rest = raw[len(prefix):].partition("/")
        return prefix + segment + slash + unquote(rest)
    segment, slash, rest = path[len(prefix):].partition("/")
    return prefix + quote(segment, safe="") + slash + rest


def group_id(segment: str) -> str:
    """The group id of a path segment kept encoded by `GroupPaths`."""
    return unquote(segment)


class GroupPaths:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(PREFIXES):
            scope = {**scope, "path": encoded_group_path(scope["path"], scope.get("raw_path"))}
        await self.app(scope, receive, send)
