"""Run the HTTP tier under uvicorn: `lakelog serve`."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket

import anyio.to_thread
import uvicorn
from fastapi import FastAPI
from starlette.datastructures import State

from lakelog.ingest_api.app import create_app, hand_over
from lakelog.observability import startup_log
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
    hosts = [settings.host] + ([settings.kafka_host] if settings.kafka_host and settings.kafka_port >= 0 else [])
    for host in hosts:
        if not is_loopback(host) and not settings.authentication and not settings.insecure:
            raise RefusedToStart(
                f"refusing to listen on {host} without authentication: set LAKELOG_API_KEYS_JSON "
                "(API key -> principal), or pass --insecure"
            )


def uvicorn_config(settings: Settings, log_level: str = "warning") -> uvicorn.Config:
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=log_level.lower(),
        access_log=settings.access_log,
        lifespan="on",
        timeout_graceful_shutdown=settings.shutdown_timeout_s,
        log_config=None,
    )
    if settings.access_log:  # one line per request even when the rest is quiet (uvicorn set it to log_level)
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    return config


class Server(uvicorn.Server):
    """uvicorn's server, saying once where it listens when the sockets are bound."""

    def __init__(self, config: uvicorn.Config, settings: Settings) -> None:
        super().__init__(config)
        self.settings = settings

    @property
    def app_state(self) -> State:
        """The state of the app served: `uvicorn_config` gives uvicorn the app itself, not an import string."""
        app = self.config.app
        if not isinstance(app, FastAPI):
            raise TypeError(f"lakelog's server runs a FastAPI app, not {type(app).__name__}")
        return app.state

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            kafka = getattr(self.app_state, "kafka", None)
            startup_log.info(start_line(self.settings, self.urls(), kafka and "{}:{:d}".format(*kafka.advertised)))

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Hand this node's groups over while still listening, and give the other nodes one heartbeat to
        notice before the listeners close: clients meet retriable answers, not refused connections."""
        services = getattr(self.app_state, "services", None)
        if services is not None and services.broker.cluster is not None:
            await anyio.to_thread.run_sync(hand_over, services)
            await asyncio.sleep(services.settings.broker_heartbeat_interval_ms / 1000)
        await super().shutdown(sockets)

    def urls(self) -> list[str]:
        bound = [sock.getsockname() for server in self.servers for sock in (server.sockets or ())]
        return [f"http://{_host(address[0])}:{address[1]}" for address in bound] or [
            f"http://{_host(self.settings.host)}:{self.settings.port}"]


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def start_line(settings: Settings, urls: list[str], kafka: str | None = None) -> str:
    authentication = "on" if settings.authentication else "off"
    listeners = " ".join(urls) + (f" kafka://{kafka}" if kafka else "")
    return f"lakelog serving {listeners} root={settings.root} authentication={authentication}"


def serve(settings: Settings, log_level: str = "warning") -> None:
    check_exposure(settings)
    Server(uvicorn_config(settings, log_level), settings).run()
