"""The cluster as Kafka clients see it: brokers with int32 ids, topic leaders, group coordinators.

lakelog's node ids are strings; a Kafka broker id is derived from one (stable across restarts, as the
node id is). Leadership is lakelog's own (rendezvous hashing over the live nodes, `platform/cluster`):
a topic's partitions all name its leader, a group its coordinator. A node without a fresh view names
itself, which is always correct (any node writes any topic; a group request it does not coordinate is
answered NOT_COORDINATOR).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from lakelog.kafka_api.context import Context
from lakelog.platform.cluster.errors import NotInCluster
from lakelog.platform.cluster.membership import Node, View
from lakelog.platform.cluster.ownership import group_key, topic_key, transaction_key


@dataclass(frozen=True)
class Broker:
    broker_id: int
    host: str
    port: int


def broker_id(node_id: str) -> int:
    return zlib.crc32(node_id.encode()) & 0x7FFFFFFF


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def local(context: Context) -> Broker:
    cluster = context.services.broker.cluster
    node_id = cluster.local.node_id if cluster is not None else "local"
    return Broker(broker_id(node_id), *context.advertised)


def _view(context: Context) -> View | None:
    cluster = context.services.broker.cluster
    if cluster is None:
        return None
    try:
        return cluster.view()
    except NotInCluster:
        return None


def _broker(context: Context, node: Node, view: View) -> Broker:
    if view.is_local(node) or node.kafka is None:
        return local(context)
    return Broker(broker_id(node.node_id), *parse_address(node.kafka))


def brokers(context: Context) -> list[Broker]:
    view = _view(context)
    if view is None:
        return [local(context)]
    found = {_broker(context, node, view) for node in view.nodes}
    return sorted(found, key=lambda b: b.broker_id)


def leader(context: Context, topic: str) -> Broker:
    view = _view(context)
    return local(context) if view is None else _broker(context, view.owner(topic_key(topic)), view)


def coordinator(context: Context, group: str) -> Broker:
    view = _view(context)
    return local(context) if view is None else _broker(context, view.owner(group_key(group)), view)


def transaction_coordinator(context: Context, transactional_id: str) -> Broker:
    view = _view(context)
    return local(context) if view is None else _broker(context, view.owner(transaction_key(transactional_id)), view)


def coordinates(context: Context, group: str) -> bool:
    return coordinator(context, group) == local(context)
