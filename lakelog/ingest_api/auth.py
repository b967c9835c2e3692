"""Who is calling: a bearer API key mapped to a principal (or `anonymous` when authentication is off)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from lakelog.ingest_api.dependencies import Services, current_services, services_of

bearer = HTTPBearer(auto_error=False, description="An API key, when the server has authentication on")


async def principal(request: Request,
              credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> str:
    token = credentials.credentials if credentials is not None else None
    return current_services(request).authorizer.authenticate(token)


def bearer_token(request: Request) -> str | None:
    """The API key of a request, read directly (the produce hot path and middleware skip dependencies)."""
    return bearer_of(request.headers.get("authorization"))


def bearer_of(header: str | None) -> str | None:
    """The API key of an Authorization header's value."""
    if header and header[:7].lower() == "bearer ":
        return header[7:].strip()
    return None


Principal = Annotated[str, Depends(principal)]
Svc = Annotated[Services, Depends(services_of)]
