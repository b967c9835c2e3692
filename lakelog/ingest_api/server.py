"""Run the HTTP tier under uvicorn: `lakelog serve`."""

from __future__ import annotations

import ipaddress
import logging

import uvicorn

from lakelog.ingest_api.app import create_app
from lakelog.settings import Settings

log = logging.getLogger(__name__)


class RefusedToStart(Exception):
    pass


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(settings: Settings) -> None:
    """A non-loopback address without authentication needs an explicit --insecure."""
    if not is_loopback(settings.host) and not settings.authentication and not settings.insecure:
        raise RefusedToStart(
            f"refusing to listen on {settings.host} without authentication: set LAKELOG_API_KEYS_JSON "
            "(API key -> principal), or pass --insecure"
        )


def uvicorn_config(settings: Settings, log_level: str = "warning") -> uvicorn.Config:
    return uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=log_level.lower(),
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=settings.shutdown_timeout_s,
        log_config=None,
    )


def serve(settings: Settings, log_level: str = "warning") -> None:
    check_exposure(settings)
    server = uvicorn.Server(uvicorn_config(settings, log_level))
    server.run()
