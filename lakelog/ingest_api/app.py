"""The FastAPI application: wiring of broker, group coordinator, access control, metrics and routes."""

from __future__ import annotations

import gc
import ipaddress
import logging
import socket
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from lakelog.ingest_api import api_docs, console, errors, openapi
from lakelog.ingest_api.auth import bearer_token
from lakelog.ingest_api.cluster_routing import OwnerRouting
from lakelog.ingest_api.dependencies import Services, current_services
from lakelog.ingest_api.fast_path import ProduceFastPath, produce_topic
from lakelog.ingest_api.group_paths import GroupPaths
from lakelog.ingest_api.metrics import Metrics
from lakelog.ingest_api.routes import admin, cluster, groups, records, schema_registry, share_groups, topics
from lakelog.kafka_api.listener import KafkaListener, tls_context
from lakelog.observability import startup_log
from lakelog.platform import Broker
from lakelog.platform.acl import AclStore, Authorizer
from lakelog.platform.cluster import Membership, Node, View
from lakelog.platform.cluster.forwarding import NodeClient
from lakelog.platform.cluster.membership import check_node_id, node_id_of
from lakelog.platform.cluster.ownership import group_key, transaction_key
from lakelog.platform.delta.control_table import control_table_exists
from lakelog.platform.errors import LakelogError, StorageUnavailable
from lakelog.platform.groups import GroupCoordinator
from lakelog.platform.layout import SHARE_STATE_TABLE, TRANSACTIONS_TABLE
from lakelog.platform.ops.history import HistorySampler
from lakelog.platform.storage import STORAGE_ERRORS, Storage, describe_storage_error
from lakelog.platform.transactions.handover import Handover
from lakelog.settings import Settings

log = logging.getLogger(__name__)
STARTUP_RETRY_S = (0.5, 1.0, 2.0, 5.0)  # pauses between start attempts while the store is down, then the last
WORKER_THREADS = 256  # long polls hold a worker thread each

DESCRIPTION = """Kafka's model (topics, partitions, offsets, consumer groups) stored as Delta Lake tables.

Errors are JSON `{"error_code", "message", "retriable"}` with Kafka's error names. When the server has
authentication on, send `Authorization: Bearer <API key>`.
"""


def start_services(settings: Settings, broker: Broker | None = None) -> Services:
    if broker is not None:
        return _services_on(settings, broker)
    own = Broker(with_journal_node(settings))
    try:
        return _services_on(settings, own)
    except BaseException:  # a later control table failed: the next attempt opens a new broker
        own.close()
        raise


def _services_on(settings: Settings, broker: Broker) -> Services:
    coordinator = GroupCoordinator(
        broker,
        initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
        min_session_timeout_ms=settings.group_min_session_timeout_ms,
        max_session_timeout_ms=settings.group_max_session_timeout_ms,
        commit_linger_ms=settings.offsets_commit_linger_ms,
    )
    acls = AclStore(broker.storage)
    authorizer = Authorizer(acls, settings.api_keys, settings.admin_principals)
    metrics = Metrics()
    metrics.attach(broker, coordinator)
    txn_handover = join_cluster(settings, broker, coordinator)
    # Started once the node knows what it leads: the history it samples is of its own topics and groups.
    history = HistorySampler(broker, coordinator, settings.history_interval_s, settings.history_window_s).start()
    services = Services(settings, broker, coordinator, acls, authorizer, metrics, history,
                        txn_handover=txn_handover)
    if control_table_exists(broker.storage, TRANSACTIONS_TABLE):  # transactions left to complete or time out
        services.transactions()
    if control_table_exists(broker.storage, SHARE_STATE_TABLE):  # share groups' records whose locks run out
        services.shares()
    return services


def join_cluster(settings: Settings, broker: Broker, coordinator: GroupCoordinator) -> Handover:
    """Every server is a node of the cluster of its root (alone, it leads everything): it renews its
    heartbeat, and when the live nodes change its group coordinator keeps only the groups it owns, and
    the transactional ids move with the hand-over returned (for the transaction coordinator)."""
    node = Node(cluster_node_id(settings), advertised_address(settings), kafka_address(settings))
    membership = Membership(broker.storage, node, settings.broker_heartbeat_interval_ms,
                            settings.broker_session_timeout_ms)

    joined = threading.Event()  # before the first round this node coordinates nothing

    def groups_moved(old: View | None, new: View) -> None:
        # `old` None: renewed after a lapse; whatever this node knew of a group is stale.
        before = old if joined.is_set() else None
        coordinated = (lambda g: False) if before is None else (lambda g: before.is_local(before.owner(group_key(g))))
        coordinator.reassign(coordinated, lambda g: new.is_local(new.owner(group_key(g))),
                             lambda groups: membership.released({group_key(g) for g in groups}),
                             poll_s=settings.broker_heartbeat_interval_ms / 1000,
                             wait_s=settings.broker_session_timeout_ms / 1000)

    txn_handover = Handover()

    def transactions_moved(old: View | None, new: View) -> None:
        before = old if joined.is_set() else None
        txn_handover.reassign((lambda t: False) if before is None
                              else (lambda t: before.is_local(before.owner(transaction_key(t)))),
                              lambda t: new.is_local(new.owner(transaction_key(t))),
                              [n.node_id for n in new.nodes], lambda: membership.published_views(new.nodes),
                              poll_s=settings.broker_heartbeat_interval_ms / 1000,
                              wait_s=settings.broker_session_timeout_ms / 1000,
                              let_go_s=settings.broker_session_timeout_ms / 2000)

    membership.on_change(groups_moved)
    membership.on_change(transactions_moved)
    membership.start()
    joined.set()
    broker.join_cluster(membership, NodeClient(settings.cluster_secret))
    return txn_handover


def cluster_node_id(settings: Settings) -> str:
    """This node's id in the cluster: configured, or from the address it advertises."""
    return check_node_id(settings.node_id or node_id_of(advertised_address(settings)))


def with_journal_node(settings: Settings) -> Settings:
    """Unset, the node journal's folder is the node's id: processes sharing a root need distinct folders
    (the same one fences the other's generation at every start), and the node ids already differ."""
    if settings.journal_node is not None:
        return settings
    return settings.model_copy(update={"journal_node": cluster_node_id(settings)})


def advertised_address(settings: Settings) -> str:
    return settings.advertise or own_address(settings)


def reachable_host(host: str) -> str:
    """Where a listener bound to `host` is reached: one bound to every interface (only when configured so)
    is reached at the address of the machine's host name."""
    try:
        every_interface = ipaddress.ip_address(host).is_unspecified
    except ValueError:
        every_interface = host == ""
    return socket.gethostbyname(socket.gethostname()) if every_interface else host


def own_address(settings: Settings) -> str:
    host = reachable_host(settings.host)
    return f"http://{f'[{host}]' if ':' in host else host}:{settings.port}"


def kafka_address(settings: Settings) -> str | None:
    """host:port Kafka clients reach this node at (None: no Kafka listener)."""
    if settings.kafka_advertise or settings.kafka_port < 0:
        return settings.kafka_advertise
    host = reachable_host(settings.kafka_host or settings.host)
    return f"{f'[{host}]' if ':' in host else host}:{settings.kafka_port}"


async def start_kafka_listener(app: FastAPI, settings: Settings) -> tuple[KafkaListener | None, Settings]:
    """The Kafka listener beside HTTP (unless kafka_port is -1), bound before the node joins the cluster
    so that the address it advertises is the bound one (kafka_port 0: a free port)."""
    if settings.kafka_port < 0:
        return None, settings
    listener = KafkaListener(settings.kafka_host or settings.host, settings.kafka_port,
                             lambda: getattr(app.state, "services", None),
                             tls_context(settings.kafka_tls_cert_file, settings.kafka_tls_key_file))
    await listener.start()
    app.state.kafka = listener
    bound = settings.model_copy(update={"kafka_port": listener.port})
    address = kafka_address(bound)
    assert address is not None  # None only without a Kafka listener
    listener.advertise(address)
    return listener, bound


class Startup:
    """Starts the services, and while the store is down keeps trying in the background: the server runs,
    /readyz answers 503 with `cause`, and it becomes ready when the store comes back."""

    def __init__(self, settings: Settings, broker: Broker | None = None) -> None:
        self.settings = settings
        self.broker = broker
        self.cause = "starting"
        self.services: Services | None = None
        self._stop = threading.Event()

    def attempt(self) -> Services | None:
        try:
            services = start_services(self.settings, self.broker)
        except StorageUnavailable as exc:
            self._failed(exc.message)
            return None
        except STORAGE_ERRORS as exc:
            self._failed(describe_storage_error(Storage.open(self.settings.root, self.settings.storage), exc))
            return None
        if services.broker.catalog.created:
            startup_log.info(f"created a lakelog catalog at {services.broker.storage.root}")
        if self.cause != "starting":
            startup_log.info(f"storage ready: {services.broker.storage.root}")
        self.services, self.cause = services, ""
        return services

    def _failed(self, cause: str) -> None:
        if cause != self.cause:  # one line per new cause, not one per attempt
            log.warning(f"not ready, retrying: {cause}")
        self.cause = cause

    def retry_until_ready(self, ready: Any) -> None:
        """`ready(services)` is called once they start; stops early on `stop()`."""
        attempt = 0
        while not self._stop.wait(STARTUP_RETRY_S[min(attempt, len(STARTUP_RETRY_S) - 1)]):
            attempt += 1
            services = self.attempt()
            if services is not None:
                ready(services)
                return

    def stop(self) -> None:
        self._stop.set()


def hand_over(services: Services) -> None:
    """The first step of a graceful stop in a cluster: group requests are refused (retriable), the offsets
    this node acknowledged are durable, and the node leaves, so that the next coordinator of each of its
    groups loads them all. Its topics need nothing: every commit is in the log already."""
    services.handing_over = True
    services.coordinator.store.flush()
    if services.broker.cluster is not None:
        services.broker.cluster.leave()


def stop_services(services: Services) -> None:
    """Graceful: no new produce, pending produce flushed (acks >= 1 answered), group offsets committed."""
    services.closing = True
    services.history.close()  # before what it samples closes
    if services.broker.cluster is not None:  # the others take this node's topics and groups at their next round
        services.broker.cluster.leave()
    try:
        if services._transactions is not None:
            services._transactions.close()
        if services._shares is not None:
            services._shares.close()
        services.coordinator.close()
    finally:
        services.broker.close()


def create_app(settings: Settings | None = None, broker: Broker | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = WORKER_THREADS
        kafka, node_settings = await start_kafka_listener(app, settings)
        startup = Startup(node_settings, broker)
        app.state.startup, app.state.services = startup, None
        retrying: threading.Thread | None = None
        services = await anyio.to_thread.run_sync(startup.attempt)
        if services is not None:
            _ready(app, services)
        else:  # the store is down: serve /healthz and a 503 /readyz while trying again
            retrying = threading.Thread(target=startup.retry_until_ready, args=(lambda s: _ready(app, s),),
                                        name="lakelog-startup", daemon=True)
            retrying.start()
        try:
            yield
        finally:
            startup.stop()
            if kafka is not None:
                await kafka.stop()
            if retrying is not None:
                await anyio.to_thread.run_sync(retrying.join)
            if app.state.services is not None:
                await anyio.to_thread.run_sync(stop_services, app.state.services)
            app.state.services = None

    app = LakelogApp(title="lakelog", version="0.1.0", description=DESCRIPTION, lifespan=lifespan,
                     docs_url=None, redoc_url=None)  # api_docs serves them from the package, no CDN
    api_docs.install(app)

    def count_error(code: str) -> None:
        services = getattr(app.state, "services", None)
        if services is not None:
            services.metrics.errors.labels(code).inc()

    errors.install(app, count_error)
    app.produce_path = ProduceFastPath(app.state, count_error)  # before every middleware (LakelogApp.__call__)
    if settings.docs_require_key and settings.authentication:
        _guard_docs(app)
    app.add_middleware(OwnerRouting)  # group requests go to the group's coordinator, a topic's history to its leader
    app.add_middleware(GroupPaths)  # before routing: a group id's encoded `/` stays in its segment
    for router in (topics.router, records.router, groups.router, share_groups.router, admin.acl_router,
                   admin.ops_router, cluster.router, schema_registry.router):
        app.include_router(router)
    console.install(app)
    return app


def _ready(app: FastAPI, services: Services) -> None:
    app.state.services = services
    # What start-up built lives as long as the server: out of the collector's sight, so that its full
    # collections stop pausing requests (measured: p99 at 500 requests/s from 87 ms to 40 ms).
    gc.collect()
    gc.freeze()


def _guard_docs(app: FastAPI) -> None:
    """/docs, /redoc and /openapi.json answer only callers with an API key (`docs_require_key`)."""
    guarded = {path for path in (app.docs_url, app.redoc_url, app.openapi_url, app.swagger_ui_oauth2_redirect_url)
               if path}

    @app.middleware("http")
    async def docs_need_a_key(request: Request, call_next: Any) -> Response:
        if request.url.path in guarded:
            try:
                current_services(request).authorizer.authenticate(bearer_token(request))
            except LakelogError as exc:  # middleware runs outside the exception handlers
                return errors.lakelog_error_response(exc)
        return await call_next(request)


class LakelogApp(FastAPI):
    """FastAPI with lakelog's OpenAPI document (`openapi.build`), made on first use, and produce requests
    served before FastAPI's layers (fast_path.py)."""

    produce_path: ProduceFastPath | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.produce_path is not None and (topic := produce_topic(scope)) is not None:
            await self.produce_path(topic, scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    def openapi(self) -> dict[str, Any]:
        if not self.openapi_schema:
            self.openapi_schema = openapi.build(self)
        return self.openapi_schema
