"""ApiVersions, Metadata and FindCoordinator: what the cluster offers and where to go."""

from __future__ import annotations

import uuid
from typing import Any, TypeAlias

from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse

from lakelog.kafka_api import nodes, protocol
from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import CODES, KafkaProtocolError, error_code
from lakelog.kafka_api.handlers import offsets_topic
from lakelog.kafka_api.handlers.cluster import cluster_operations  # v8-v10 answer them (librdkafka asks)
from lakelog.kafka_api.protocol import Call
from lakelog.kafka_api.threads import blocking
from lakelog.platform.broker import auto_create
from lakelog.platform.catalog.catalog import TopicMeta, missing_topic
from lakelog.platform.errors import TopicAlreadyExists

Broker: TypeAlias = MetadataResponse.MetadataResponseBroker
Topic: TypeAlias = MetadataResponse.MetadataResponseTopic
Partition: TypeAlias = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition
GROUP_KEY, TRANSACTION_KEY = 0, 1


async def api_versions(context: Context, call: Call) -> protocol.ApiVersionsResponse:
    return protocol.api_versions_response()


async def metadata(context: Context, call: Call) -> MetadataResponse:
    request = call.body
    broker = context.services.broker
    known: dict[str, TopicMeta | Exception] = {meta.name: meta for meta in await blocking(broker.list_topics)}
    if request.topics is None or (call.version == 0 and not request.topics):  # all topics (v0 asks with [])
        names = [n for n in sorted(known) if context.allowed("describe", "topic", n)]  # the caller may describe
        names += offsets_topic.listed(context, known)  # Kafka lists its internal topic too
    else:
        names = [t.name for t in request.topics if t.name is not None]
        if _auto_creates(context, call):
            known.update(await blocking(_create_missing, context, [n for n in names if n not in known]))
    topics = [_topic(context, name, known.get(name)) for name in names] if request.topics is None or not \
        request.topics else [_asked(context, t, known) for t in request.topics]
    local = nodes.local(context)
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[Broker(node_id=b.broker_id, host=b.host, port=b.port, rack=None) for b in nodes.brokers(context)],
        cluster_id=context.services.settings.kafka_cluster_id, controller_id=local.broker_id, topics=topics,
        authorized_operations=cluster_operations(context) if request.include_cluster_authorized_operations else None)


def _asked(context: Context, asked: Any, known: dict[str, TopicMeta | Exception]) -> Topic:
    """One topic the request names, by name or (v10+, name null) by its topic id alone."""
    if asked.name is not None:
        return _topic(context, asked.name, known.get(asked.name))
    for meta in known.values():
        if isinstance(meta, TopicMeta) and meta.topic_id == asked.topic_id:
            return _topic(context, meta.name, meta)
    return _unknown_id(asked.topic_id)


def _unknown_id(topic_id: uuid.UUID | None) -> Topic:
    """A topic asked for by an id no topic has (Kafka's UNKNOWN_TOPIC_ID, name null)."""
    return Topic(error_code=CODES["UNKNOWN_TOPIC_ID"], name=None, topic_id=topic_id, is_internal=False, partitions=[])


def _auto_creates(context: Context, call: Call) -> bool:
    """auto.create.topics.enable, and the request allows it (v4+ say so; v0-v3 always allow it)."""
    allowed = call.version < 4 or call.body.allow_auto_topic_creation
    return allowed and context.services.settings.auto_create_topics_enable


def _create_missing(context: Context, names: list[str]) -> dict[str, TopicMeta | Exception]:
    """The missing topics of a Metadata request created, as Kafka's auto.create.topics.enable creates them
    (blocking: catalog I/O). At once, so the answer names their partitions (Kafka answers LEADER_NOT_AVAILABLE
    until its controller is done). Left out: names the caller may not describe (refused as such), illegal
    and internal names (answered as missing); the refusal of a principal that may not create a topic
    (TOPIC_AUTHORIZATION_FAILED, as Kafka) or a failed creation is that topic's answer."""
    services, settings = context.services, context.services.settings
    found: dict[str, TopicMeta | Exception] = {}
    for name in dict.fromkeys(names):
        if not context.allowed("describe", "topic", name) or not auto_create.creatable(name):
            continue
        try:
            found[name] = auto_create.create_on_first_use(services.broker, services.authorizer, context.principal,
                                                          name, settings.num_partitions,
                                                          settings.default_replication_factor)
        except TopicAlreadyExists as exc:  # a former table still being deleted: not yet, as Kafka answers it
            found[name] = KafkaProtocolError(str(exc), CODES["LEADER_NOT_AVAILABLE"])
        except Exception as exc:
            found[name] = exc
    return found


def _topic(context: Context, name: str, meta: TopicMeta | Exception | None) -> Topic:
    if not context.allowed("describe", "topic", name):
        return Topic(error_code=CODES["TOPIC_AUTHORIZATION_FAILED"], name=name, is_internal=False, partitions=[])
    if isinstance(meta, Exception):  # a creation on first use refused or failed
        return Topic(error_code=error_code(meta), name=name, is_internal=False, partitions=[])
    if meta is None and offsets_topic.is_offsets_topic(name):
        return offsets_topic.metadata_topic(context)
    if meta is None:
        return Topic(error_code=error_code(missing_topic(name)), name=name, is_internal=False,
                     partitions=[])
    leader = nodes.leader(context, name).broker_id
    partitions = [Partition(error_code=0, partition_index=p, leader_id=leader, leader_epoch=0,
                            replica_nodes=[leader], isr_nodes=[leader], offline_replicas=[])
                  for p in range(meta.partitions)]
    return Topic(error_code=0, name=name, topic_id=meta.topic_id, is_internal=False, partitions=partitions)


async def find_coordinator(context: Context, call: Call) -> FindCoordinatorResponse:
    request = call.body
    if call.version >= 4:  # KIP-699: several keys in one request, one answer each
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
            FindCoordinatorResponse.Coordinator(key=key, **_coordinator(context, request.key_type, key))
            for key in request.coordinator_keys])
    return FindCoordinatorResponse(throttle_time_ms=0, **_coordinator(context, request.key_type, request.key))


def _coordinator(context: Context, key_type: int, key: str) -> dict[str, Any]:
    """The coordinator of one key, as the fields of an answer (top-level before v4, per key from v4)."""
    if key_type == TRANSACTION_KEY:  # transactional ids have no ACL resource in lakelog: any principal may ask
        coordinator = nodes.transaction_coordinator(context, key)
        return dict(error_code=0, error_message=None, node_id=coordinator.broker_id, host=coordinator.host,
                    port=coordinator.port)
    if not context.allowed("describe", "group", key):
        return dict(error_code=CODES["GROUP_AUTHORIZATION_FAILED"], node_id=-1, host="", port=-1,
                    error_message=f"may not describe group {key!r}")
    coordinator = nodes.coordinator(context, key)
    return dict(error_code=0, error_message=None, node_id=coordinator.broker_id, host=coordinator.host,
                port=coordinator.port)
