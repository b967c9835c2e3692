"""What one server holds while it runs: the broker, the group coordinator, ACLs, metrics, the plots' history,
back-pressure."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from lakelog.ingest_api.errors import BodyTooLarge, ShuttingDown, Throttled
from lakelog.ingest_api.metrics import Metrics
from lakelog.platform import Broker
from lakelog.platform.acl import AclStore, Authorizer
from lakelog.platform.errors import StorageUnavailable
from lakelog.platform.groups import GroupCoordinator
from lakelog.platform.ops.history import HistorySampler
from lakelog.platform.schema_registry import SchemaRegistry
from lakelog.platform.schema_registry.validation import RecordValidator
from lakelog.platform.share import ShareCoordinator, group_owner
from lakelog.platform.transactions.coordinator import TransactionCoordinator, cluster_owner
from lakelog.platform.transactions.handover import Handover
from lakelog.settings import Settings

T = TypeVar("T")


@dataclass
class Services:
    settings: Settings
    broker: Broker
    coordinator: GroupCoordinator
    acls: AclStore
    authorizer: Authorizer
    metrics: Metrics
    history: HistorySampler
    inflight_bytes: int = 0
    open_topics: set[str] = field(default_factory=set)
    closing: bool = False
    handing_over: bool = False  # shutting down in a cluster: groups are being handed to other nodes
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _registry: SchemaRegistry | None = None
    _registry_lock: threading.Lock = field(default_factory=threading.Lock)
    _validator: RecordValidator | None = None
    _transactions: TransactionCoordinator | None = None
    _shares: ShareCoordinator | None = None
    txn_handover: Handover | None = None  # the cluster's hand-over of transactional ids (app.join_cluster)

    def schema_registry(self) -> SchemaRegistry:
        """The root's schema registry, its control table opened (created) on first use."""
        with self._registry_lock:
            if self._registry is None:
                self._registry = SchemaRegistry(self.broker.storage)
            return self._registry

    def transactions(self) -> TransactionCoordinator:
        """The node's Kafka transaction coordinator, started on first use (its state read from the root)."""
        with self._registry_lock:
            if self._transactions is None:
                self._transactions = TransactionCoordinator(self.broker.storage, self.broker.topic_log,
                                                            self.coordinator.commit_transactional,
                                                            self.coordinator.committed,
                                                            owns=cluster_owner(self.broker.cluster),
                                                            reload_group=self.coordinator.reload_offsets,
                                                            handover=self.txn_handover)
            return self._transactions

    def shares(self) -> ShareCoordinator:
        """The node's share coordinator (KIP-932's share groups), started on first use (its state read from
        the root)."""
        with self._registry_lock:
            if self._shares is None:
                self._shares = ShareCoordinator(self.broker, self.settings, owns=group_owner(self.broker.cluster))
            return self._shares

    def record_validator(self) -> RecordValidator:
        """Typed topics' record checks against the registry (storage I/O on first use: off the event loop)."""
        registry = self.schema_registry()
        with self._registry_lock:
            if self._validator is None:
                self._validator = RecordValidator(registry)
            return self._validator

    def reserve(self, size: int) -> None:
        """Back-pressure: refuse produce bodies beyond `max_inflight_produce_bytes` held at once."""
        with self._lock:
            if self.closing:
                raise ShuttingDown("the server is shutting down")
            if self.inflight_bytes and self.inflight_bytes + size > self.settings.max_inflight_produce_bytes:
                raise Throttled(f"{self.inflight_bytes} bytes of produce requests are in flight, the limit "
                                f"(max_inflight_produce_bytes) is {self.settings.max_inflight_produce_bytes}; retry")
            self.inflight_bytes += size

    def release(self, size: int) -> None:
        with self._lock:
            self.inflight_bytes -= size


def current_services(request: Request) -> Services:
    return services_in(request.app.state)


def services_in(state: Any) -> Services:
    """The services of an app's `state` (the produce fast path has no Request)."""
    services: Services | None = getattr(state, "services", None)
    if services is None:
        startup = getattr(state, "startup", None)
        if startup is not None and startup.cause:  # the store is down at start: say why
            raise StorageUnavailable(startup.cause)
        raise ShuttingDown("the server is not ready")
    return services


async def services_of(request: Request) -> Services:
    """The dependency (async: no worker-thread hop on the hot path)."""
    return current_services(request)


async def read_body(request: Request, services: Services) -> bytes:
    """The request body, its bytes reserved from the in-flight budget before they are read: the declared
    Content-Length up front (429 before a byte is read), a chunked body as it arrives. Refused with 413
    (naming the limit) as soon as it passes `max_request_bytes`. The caller releases len(body)."""
    return await collect_body(request.stream(), request.headers.get("content-length"), services)


def reserve_declared(declared: str | None, services: Services) -> int:
    """A body's declared Content-Length, refused over `max_request_bytes` (413) and reserved from the
    in-flight budget (429) before a byte of it is read: what `read_body` reserved up front."""
    limit = services.settings.max_request_bytes
    expected = int(declared) if declared is not None and declared.isdigit() else 0
    if expected > limit:
        raise BodyTooLarge(f"the request body is {declared} bytes, over the limit (max_request_bytes) of "
                           f"{limit} bytes")
    services.reserve(expected)
    return expected


def whole_body(body: bytes, reserved: int, services: Services) -> bytes:
    """A body read in one piece, `reserved` bytes of it reserved (`reserve_declared`): checked, its
    reservation made its size (all of it released when refused)."""
    size = len(body)
    try:
        if size > services.settings.max_request_bytes:
            raise BodyTooLarge("the request body is over the limit (max_request_bytes) of "
                               f"{services.settings.max_request_bytes} bytes")
        if size > reserved:
            services.reserve(size - reserved)
            reserved = size
    except BaseException:
        services.release(reserved)
        raise
    services.release(reserved - size)
    return body


async def collect_body(stream: AsyncIterator[bytes], declared: str | None, services: Services) -> bytes:
    """`read_body` of any stream of body chunks, `declared` its Content-Length header."""
    return await collect_reserved(stream, reserve_declared(declared, services), services)


async def collect_reserved(stream: AsyncIterator[bytes], reserved: int, services: Services) -> bytes:
    """The chunks of a body, `reserved` bytes of it reserved (`reserve_declared`), reserved as they pass it."""
    limit = services.settings.max_request_bytes
    size, chunks = 0, []
    try:
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(f"the request body is over the limit (max_request_bytes) of {limit} bytes")
            if size > reserved:
                services.reserve(size - reserved)
                reserved = size
            chunks.append(chunk)
    except BaseException:
        services.release(reserved)
        raise
    services.release(reserved - size)
    return b"".join(chunks)


async def blocking(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking core call (storage I/O, long poll) on a worker thread."""
    return await run_in_threadpool(func, *args, **kwargs)
