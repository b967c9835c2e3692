"""Topics created on first use (Kafka's `auto.create.topics.enable`): which names may be, who may, and the
creation itself.

The creation is CreateTopics' (`Broker.create_topic`: the catalog's compare-and-set), so two calls or two
nodes creating the same topic at once end with one topic and no error to either: the loser's
TOPIC_ALREADY_EXISTS is swallowed and it answers the topic the winner created. Whether it is on, and with
how many partitions, are the node's settings, which the protocol layers read and pass here.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc

from lakelog.platform.acl import CLUSTER, Authorizer, TopicAuthorizationFailed
from lakelog.platform.broker.node import Broker
from lakelog.platform.catalog.catalog import TopicMeta, validate_topic_name
from lakelog.platform.errors import InvalidTopic, TopicAlreadyExists, UnknownTopicOrPartition
from lakelog.platform.records import RecordColumns

log = logging.getLogger(__name__)

# Kafka's internal topics (__consumer_offsets, __transaction_state, KRaft's __cluster_metadata) and any other
# name of the prefix: never created on first use (CreateTopics still may create a user's `__` topic).
INTERNAL_PREFIX = "__"


def creatable(name: str) -> bool:
    """A legal topic name outside the internal prefix: only such a name is ever created on first use (an
    illegal one is answered as the protocol answers it, without creating anything)."""
    try:
        validate_topic_name(name)
    except InvalidTopic:
        return False
    return not name.startswith(INTERNAL_PREFIX)


def may_create(authorizer: Authorizer, principal: str, name: str) -> bool:
    """Kafka's check: CREATE on the cluster, or else CREATE on the topic."""
    return (authorizer.allowed(principal, "create", "cluster", CLUSTER)
            or authorizer.allowed(principal, "create", "topic", name))


def highest_partition(records: RecordColumns | pa.Table) -> int:
    """The highest partition a produce call's records name explicitly (-1: none names one)."""
    if isinstance(records, pa.Table):
        if "partition" not in records.column_names:
            return -1
        highest = pc.max(records.column("partition")).as_py()
    else:
        highest = max((p for p in records.partitions or () if p is not None), default=None)
    return -1 if highest is None else int(highest)


def create_on_first_use(broker: Broker, authorizer: Authorizer, principal: str, name: str, partitions: int,
                        replication_factor: int, least_partitions: int = 1) -> TopicMeta:
    """The topic `name`, created with `partitions` partitions (and `replication_factor` when the node has
    replica sites; without sites the storage is the replication) unless it exists by then. Refused with
    TOPIC_AUTHORIZATION_FAILED when `principal` may not create it, as Kafka refuses it; with
    UNKNOWN_TOPIC_OR_PARTITION, creating nothing, when the call needs more partitions (`least_partitions`:
    its records name partition `least_partitions - 1`) than the topic would have."""
    if not creatable(name):  # the callers check; a last guard, since a created topic cannot be taken back
        raise InvalidTopic(f"topic {name!r} is not created on first use (an illegal or internal name)")
    if not may_create(authorizer, principal, name):
        raise TopicAuthorizationFailed(f"topic {name!r} does not exist and principal {principal!r} may not "
                                       "create it (auto.create.topics.enable needs CREATE on the cluster or "
                                       "the topic)")
    if least_partitions > partitions:  # bad input changes nothing
        raise UnknownTopicOrPartition(f"unknown topic {name!r}, not created on first use: the records name "
                                      f"partition {least_partitions - 1}, and it would have {partitions} "
                                      f"(num.partitions)")
    config = {"replication.factor": replication_factor} if broker.replicas is not None else None
    try:
        meta = broker.create_topic(name, partitions, config)
    except TopicAlreadyExists as exists:  # another call or node created it first: theirs is the topic
        try:
            return broker.catalog.get(name)
        except UnknownTopicOrPartition:  # no topic: the name's former table is still being deleted
            log.warning("topic %s not created on first use: %s", name, exists)
            raise exists from None
    log.info("created topic %s on first use (%d partitions) for principal %r", name, meta.partitions, principal)
    return meta
