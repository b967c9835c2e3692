"""What a handler sees of one connection: the server's services, the caller's principal, the cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from lakelog.kafka_api.fetch_sessions import FetchSessions
from lakelog.kafka_api.relay import Relays
from lakelog.kafka_api.share_sessions import ShareSessions
from lakelog.platform.acl import ANONYMOUS, Authorizer
from lakelog.platform.broker.node import Broker
from lakelog.platform.errors import BrokerClosed
from lakelog.platform.groups import GroupCoordinator
from lakelog.platform.schema_registry.validation import RecordValidator
from lakelog.platform.share import ShareCoordinator
from lakelog.platform.transactions.coordinator import TransactionCoordinator
from lakelog.settings import Settings


class Services(Protocol):
    """The parts of a running server the Kafka listener uses (the HTTP tier's `Services` fits)."""

    settings: Settings
    broker: Broker
    coordinator: GroupCoordinator
    authorizer: Authorizer
    closing: bool
    handing_over: bool
    open_topics: set[str]  # topics whose tables are open: produce submits without storage I/O

    def transactions(self) -> TransactionCoordinator: ...  # the node's transaction coordinator

    def shares(self) -> ShareCoordinator: ...  # the node's share coordinator (KIP-932)

    def record_validator(self) -> RecordValidator: ...  # typed topics' checks (storage I/O on first use)


@dataclass
class Context:
    services_of: Callable[[], Services | None]
    advertised: tuple[str, int]  # this node's Kafka address
    peer: str = ""
    principal: str = ANONYMOUS
    authenticated: bool = False
    sasl_mechanism: str | None = None
    client_id: str | None = None
    share_sessions: ShareSessions = field(default_factory=ShareSessions)  # the listener's (ShareFetch)
    relays: Relays = field(default_factory=Relays)  # this connection's share calls passed on to other nodes
    submit_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # FIFO: pipelined produces keep their order
    fetch_sessions: FetchSessions = field(default_factory=FetchSessions)  # the listener's (Fetch, KIP-227)

    @property
    def services(self) -> Services:
        services = self.services_of()
        if services is None or services.closing:
            raise BrokerClosed("the server is not ready or is shutting down")
        return services

    def check(self, operation: str, resource_type: str, name: str) -> None:
        self.services.authorizer.check(self.principal, operation, resource_type, name)

    def allowed(self, operation: str, resource_type: str, name: str) -> bool:
        return self.services.authorizer.allowed(self.principal, operation, resource_type, name)
