"""Topic admin over Kafka: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, IncrementalAlterConfigs.

The same broker calls and the same ACLs as the HTTP routes (`ingest_api/routes/topics.py`): create,
delete, alter (partitions, configs) and describe on the topic. Every item of a request (a topic, a
config resource) is answered with its own error code and message; a refused item changes nothing.

lakelog places partitions itself and its storage is the replication: replica assignments are refused,
and a replication factor means something only with replica sites (`replication.factor`). The catalog
stores a topic's whole config, so a value is reported as a default when it equals Kafka's default.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from kafka.protocol.admin import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)

from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import CODES, KafkaProtocolError, error_code, error_message
from lakelog.kafka_api.handlers import group_configs
from lakelog.kafka_api.protocol import Call
from lakelog.kafka_api.threads import blocking
from lakelog.platform.acl import CLUSTER, ClusterAuthorizationFailed, TopicAuthorizationFailed
from lakelog.platform.broker.node import Broker
from lakelog.platform.catalog.catalog import TopicMeta, validate_partitions, validate_topic_name
from lakelog.platform.catalog.topic_config import KNOWN_KEYS, MAX_LONG, TopicConfig, parse_topic_config
from lakelog.platform.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidRequest,
    LakelogError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)

CreatedTopic: TypeAlias = CreateTopicsResponse.CreatableTopicResult
CreatedConfig: TypeAlias = CreateTopicsResponse.CreatableTopicResult.CreatableTopicConfigs
DeletedTopic: TypeAlias = DeleteTopicsResponse.DeletableTopicResult
PartitionsResult: TypeAlias = CreatePartitionsResponse.CreatePartitionsTopicResult
DescribedResource: TypeAlias = DescribeConfigsResponse.DescribeConfigsResult
DescribedConfig: TypeAlias = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
Synonym: TypeAlias = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult.DescribeConfigsSynonym
AlteredResource: TypeAlias = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse

# Kafka's numbers: config resource types, config sources, config types, IncrementalAlterConfigs operations.
TOPIC, BROKER, GROUP = 2, 4, group_configs.GROUP
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5
BOOLEAN, STRING, INT, LONG, LIST = 1, 2, 3, 5, 7
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

LIST_KEYS = frozenset({"cleanup.policy"})  # comma-separated lists in Kafka: APPEND and SUBTRACT apply
READ_ONLY_KEYS = frozenset({"replication.factor"})  # set at creation (the catalog refuses a change)
DEFAULTS: dict[str, Any] = parse_topic_config(None).to_kafka()


def _invalid_replication_factor(message: str) -> KafkaProtocolError:
    return KafkaProtocolError(message, CODES["INVALID_REPLICATION_FACTOR"])


def duplicate_in_request(kind: str, name: Any) -> InvalidRequest:
    return InvalidRequest(f"{kind} {name!r} appears more than once in the request")


Outcome = tuple[Any, BaseException | None]  # what an item's action answered, or the error that refused it


async def each_item(items: Sequence[Any], key: Callable[[Any], Any], kind: str,
                act: Callable[[Any], Awaitable[Any]]) -> list[Outcome]:
    """`act` on every item of a request, each with its own outcome. An item named more than once in one
    request is refused every time (INVALID_REQUEST), as Kafka does, and never acted on."""
    repeated = {name for name, count in Counter(key(item) for item in items).items() if count > 1}
    outcomes: list[Outcome] = []
    for item in items:
        try:
            if key(item) in repeated:
                raise duplicate_in_request(kind, key(item))
            outcomes.append((await act(item), None))
        except Exception as exc:
            outcomes.append((None, exc))
    return outcomes


def answer_codes(error: BaseException | None) -> dict[str, Any]:
    """The error_code and error_message fields of an item's answer."""
    if error is None:
        return {"error_code": 0, "error_message": None}
    return {"error_code": error_code(error), "error_message": error_message(error)}


# ---- configs as Kafka describes them --------------------------------------------------------------


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str
    default: str

    @property
    def is_default(self) -> bool:
        return self.value == self.default

    @property
    def source(self) -> int:
        return DEFAULT_CONFIG if self.is_default else DYNAMIC_TOPIC_CONFIG

    @property
    def read_only(self) -> bool:
        return self.name in READ_ONLY_KEYS


def config_entries(config: TopicConfig) -> list[ConfigEntry]:
    return [ConfigEntry(name, _kafka_string(value), _kafka_string(DEFAULTS[name]))
            for name, value in sorted(config.to_kafka().items())]


def _kafka_string(value: Any) -> str:
    """Kafka's values are strings: numbers in decimal, booleans `true`/`false`."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _config_types() -> dict[str, int]:
    """Kafka's type of each key, from TopicConfig's fields: Long fields are bounded by MAX_LONG."""
    types = {}
    for name, field in TopicConfig.model_fields.items():
        key = field.alias or name
        if key in LIST_KEYS:
            types[key] = LIST
        elif field.annotation is bool:
            types[key] = BOOLEAN
        elif field.annotation is int:
            is_long = any(getattr(constraint, "le", None) == MAX_LONG for constraint in field.metadata)
            types[key] = LONG if is_long else INT
        else:
            types[key] = STRING
    return types


CONFIG_TYPES = _config_types()


def _current_topics(broker: Broker, names: Iterable[str]) -> dict[str, TopicMeta | LakelogError]:
    """The catalog's current view of each topic: read fresh (another node may have changed it), without
    opening the topic's table as `broker.topic` would."""
    names = list(names)
    try:
        broker.catalog.refresh()
    except LakelogError as exc:
        return {name: exc for name in names}
    found: dict[str, TopicMeta | LakelogError] = {}
    for name in names:
        try:
            found[name] = broker.catalog.get(name, refresh=False)
        except LakelogError as exc:
            found[name] = exc
    return found


def current_topic(broker: Broker, name: str) -> TopicMeta:
    meta = _current_topics(broker, [name])[name]
    if isinstance(meta, LakelogError):
        raise meta
    return meta


# ---- CreateTopics ------------------------------------------------------------------------------------


async def create_topics(context: Context, call: Call) -> CreateTopicsResponse:
    request = call.body
    outcomes = await each_item(request.topics, lambda t: t.name, "topic",
                           lambda t: _create_topic(context, t, request.validate_only))
    results = [_created(meta) if error is None else
               CreatedTopic(name=topic.name, num_partitions=-1, replication_factor=-1, configs=None,
                            **answer_codes(error))
               for topic, (meta, error) in zip(request.topics, outcomes)]
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


async def _create_topic(context: Context, topic: Any, validate_only: bool) -> TopicMeta:
    if not context.allowed("create", "topic", topic.name):
        raise TopicAuthorizationFailed(f"principal {context.principal!r} may not create topic {topic.name!r}")
    if topic.assignments:
        raise InvalidRequest("replica assignments are not supported: lakelog places partitions itself")
    # Checked here in Kafka's order (name, partitions, replication, configs), before any storage I/O.
    validate_topic_name(topic.name)
    settings = context.services.settings  # -1: the node's num.partitions and default.replication.factor
    partitions = validate_partitions(settings.num_partitions if topic.num_partitions == -1 else topic.num_partitions)
    broker = context.services.broker
    factor = settings.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
    config = _with_replication_factor(broker, _requested_config(topic.configs), factor)
    parsed = parse_topic_config(config)
    _check_replication_factor(broker, parsed)
    if validate_only:
        return await blocking(_validate_create, broker, topic.name, partitions, parsed)
    return await blocking(broker.create_topic, topic.name, partitions, config)


def _requested_config(configs: Iterable[Any]) -> dict[str, str]:
    values: dict[str, str] = {}
    for entry in configs:
        if entry.name in values:
            raise duplicate_in_request("config", entry.name)
        if entry.value is None:
            raise InvalidConfig(f"config {entry.name!r} has a null value; leave it out for its default")
        values[entry.name] = entry.value
    return values


def _with_replication_factor(broker: Broker, config: dict[str, str], factor: int) -> Mapping[str, Any]:
    """The request's replication factor (-1 was replaced by default.replication.factor) is `replication.factor`
    when the node has replica sites (a config of that name wins); without sites the storage is the replication
    and it is ignored."""
    if factor < 1:
        raise _invalid_replication_factor(f"replication factor must be -1 (the default) or at least 1, got {factor}")
    if broker.replicas is None or "replication.factor" in config:
        return config
    return {**config, "replication.factor": factor}


def _check_replication_factor(broker: Broker, config: TopicConfig) -> None:
    if broker.replicas is not None and config.replication_factor > len(broker.replicas.sites):
        raise _invalid_replication_factor(f"replication factor {config.replication_factor} is larger than the "
                                          f"{len(broker.replicas.sites)} configured replica sites")


def _validate_create(broker: Broker, name: str, partitions: int, parsed: TopicConfig) -> TopicMeta:
    """The rest of what create_topic checks, without creating: the topic as it would be."""
    found = _current_topics(broker, [name])[name]
    if isinstance(found, UnknownTopicOrPartition):
        return TopicMeta(name, partitions, parsed, 0, 0, 0)
    if isinstance(found, LakelogError):  # the catalog could not be read
        raise found
    raise TopicAlreadyExists(f"topic {name!r} already exists")


def _created(meta: TopicMeta) -> CreatedTopic:
    """The created topic as v5+ answers it (older versions leave out all but name and error)."""
    configs = [CreatedConfig(name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                             is_sensitive=False)
               for e in config_entries(meta.config)]
    return CreatedTopic(name=meta.name, error_code=0, error_message=None, num_partitions=meta.partitions,
                        replication_factor=meta.config.replication_factor, configs=configs)


# ---- DeleteTopics ------------------------------------------------------------------------------------


async def delete_topics(context: Context, call: Call) -> DeleteTopicsResponse:
    names = call.body.topic_names  # v6 names topics by id too: not served (lakelog has no topic ids)
    outcomes = await each_item(names, lambda name: name, "topic", lambda name: _delete_topic(context, name))
    results = [DeletedTopic(name=name, **answer_codes(error)) for name, (_, error) in zip(names, outcomes)]
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


async def _delete_topic(context: Context, name: str) -> None:
    if not context.allowed("delete", "topic", name):
        raise TopicAuthorizationFailed(f"principal {context.principal!r} may not delete topic {name!r}")
    services = context.services
    await blocking(services.broker.delete_topic, name)
    services.open_topics.discard(name)  # its table is closed: a later produce opens a new topic's afresh


# ---- CreatePartitions --------------------------------------------------------------------------------


async def create_partitions(context: Context, call: Call) -> CreatePartitionsResponse:
    request = call.body
    outcomes = await each_item(request.topics, lambda t: t.name, "topic",
                           lambda t: _add_partitions(context, t, request.validate_only))
    results = [PartitionsResult(name=topic.name, **answer_codes(error))
               for topic, (_, error) in zip(request.topics, outcomes)]
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


async def _add_partitions(context: Context, topic: Any, validate_only: bool) -> None:
    """`topic.count` is the new total, as in Kafka."""
    if not context.allowed("alter", "topic", topic.name):
        raise TopicAuthorizationFailed(f"principal {context.principal!r} may not alter topic {topic.name!r}")
    if topic.assignments is not None:
        raise InvalidRequest("replica assignments are not supported: lakelog places partitions itself")
    broker = context.services.broker
    if validate_only:
        await blocking(_validate_partitions, broker, topic.name, topic.count)
    else:
        await blocking(broker.add_partitions, topic.name, topic.count)


def _validate_partitions(broker: Broker, name: str, total: int) -> None:
    validate_partitions(total)
    meta = current_topic(broker, name)
    if total <= meta.partitions:
        raise InvalidPartitions(f"topic {name!r} has {meta.partitions} partitions; the new count must be larger, "
                                f"got {total}")


# ---- DescribeConfigs ---------------------------------------------------------------------------------


async def describe_configs(context: Context, call: Call) -> DescribeConfigsResponse:
    request = call.body
    topics = {r.resource_name for r in request.resources
              if r.resource_type == TOPIC and context.allowed("describe", "topic", r.resource_name)}
    metas = await blocking(_current_topics, context.services.broker, sorted(topics)) if topics else {}
    results = []
    for resource in request.resources:
        try:
            configs, error = (await group_configs.describe(context, resource) if resource.resource_type == GROUP
                              else _described_configs(context, resource, metas, request.include_synonyms)), None
        except Exception as exc:
            configs, error = [], exc
        results.append(DescribedResource(resource_type=resource.resource_type, resource_name=resource.resource_name,
                                         configs=configs, **answer_codes(error)))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _described_configs(context: Context, resource: Any, metas: Mapping[str, TopicMeta | LakelogError],
                       synonyms: bool) -> list[DescribedConfig]:
    name = resource.resource_name
    if resource.resource_type == BROKER:
        # The node's settings are lakelog's own, not Kafka's broker configs: an empty list, as tools ask.
        if not context.allowed("describe", "cluster", CLUSTER):
            raise ClusterAuthorizationFailed(f"principal {context.principal!r} may not describe the cluster")
        return []
    if resource.resource_type != TOPIC:
        raise InvalidRequest(f"config resource type {resource.resource_type} is not served (topic {TOPIC}, "
                             f"broker {BROKER})")
    if name not in metas:  # left out above: not allowed
        raise TopicAuthorizationFailed(f"principal {context.principal!r} may not describe topic {name!r}")
    meta = metas[name]
    if isinstance(meta, LakelogError):
        raise meta
    keys = resource.configuration_keys  # None: all; unknown keys are left out, as Kafka does
    return [_described(entry, synonyms) for entry in config_entries(meta.config) if keys is None or entry.name in keys]


def _described(entry: ConfigEntry, synonyms: bool) -> DescribedConfig:
    found = []
    if synonyms:  # in precedence order, the entry itself first (as Kafka lists them)
        if not entry.is_default:
            found.append(Synonym(name=entry.name, value=entry.value, source=DYNAMIC_TOPIC_CONFIG))
        found.append(Synonym(name=entry.name, value=entry.default, source=DEFAULT_CONFIG))
    return DescribedConfig(name=entry.name, value=entry.value, read_only=entry.read_only, config_source=entry.source,
                           is_default=entry.is_default, is_sensitive=False, synonyms=found,
                           config_type=CONFIG_TYPES.get(entry.name, STRING), documentation=None)


# ---- IncrementalAlterConfigs -------------------------------------------------------------------------


async def incremental_alter_configs(context: Context, call: Call) -> IncrementalAlterConfigsResponse:
    request = call.body
    outcomes = await each_item(request.resources, lambda r: (r.resource_type, r.resource_name), "config resource",
                           lambda r: _alter_resource(context, r, request.validate_only))
    results = [AlteredResource(resource_type=r.resource_type, resource_name=r.resource_name, **answer_codes(error))
               for r, (_, error) in zip(request.resources, outcomes)]
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)


def alterable_topic(context: Context, resource: Any) -> str:
    """The topic a config resource of AlterConfigs or IncrementalAlterConfigs names, once the principal may
    alter it; a broker resource or another type is refused."""
    name = resource.resource_name
    if resource.resource_type == BROKER:
        raise InvalidRequest("broker configs are the node's lakelog settings: they change in its configuration")
    if resource.resource_type != TOPIC:
        raise InvalidRequest(f"config resource type {resource.resource_type} is not served (topic {TOPIC})")
    if not context.allowed("alter", "topic", name):
        raise TopicAuthorizationFailed(f"principal {context.principal!r} may not alter topic {name!r}")
    return name


async def _alter_resource(context: Context, resource: Any, validate_only: bool) -> None:
    if resource.resource_type == GROUP:
        return await group_configs.alter(context, resource, validate_only)
    name = alterable_topic(context, resource)
    await blocking(_alter_topic, context.services.broker, name, list(resource.configs), validate_only)


def _alter_topic(broker: Broker, name: str, operations: list[Any], validate_only: bool) -> None:
    """APPEND and SUBTRACT apply to the value read here: a concurrent change of the same list key between
    this read and the commit is overwritten (other keys are merged by the catalog's compare-and-set)."""
    meta = current_topic(broker, name)
    changes = _changes(meta.config, operations)
    if validate_only:
        validate_alter(meta, changes)
    elif changes:  # no operations: nothing to change, and the catalog refuses an empty change
        broker.alter_topic_config(name, changes)


def _changes(config: TopicConfig, operations: list[Any]) -> dict[str, Any]:
    current = config.to_kafka()
    changes: dict[str, Any] = {}
    for op in operations:
        if op.name in changes:
            raise duplicate_in_request("config", op.name)
        if op.name not in KNOWN_KEYS:
            raise InvalidConfig(f"unknown config key {op.name!r}; known keys: {', '.join(sorted(KNOWN_KEYS))}")
        changes[op.name] = _applied(op, current[op.name])
    return changes


def _applied(op: Any, current: Any) -> Any:
    """The value of `op.name` after the operation (DELETE: back to the default)."""
    if op.config_operation == SET:
        if op.value is None:
            raise InvalidConfig(f"config {op.name!r}: SET needs a value (DELETE resets to the default)")
        return op.value
    if op.config_operation == DELETE:
        return DEFAULTS[op.name]
    if op.config_operation in (APPEND, SUBTRACT):
        if op.name not in LIST_KEYS:
            raise InvalidConfig(f"config {op.name!r} is not a list: APPEND and SUBTRACT apply to "
                                f"{', '.join(sorted(LIST_KEYS))}")
        items, given = _items(current), _items(op.value)
        if op.config_operation == APPEND:
            return ",".join(items + [item for item in given if item not in items])
        return ",".join(item for item in items if item not in given)
    raise InvalidRequest(f"config {op.name!r}: unknown operation {op.config_operation} (SET 0, DELETE 1, "
                         "APPEND 2, SUBTRACT 3)")


def _items(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def validate_alter(meta: TopicMeta, changes: Mapping[str, Any]) -> None:
    """What the catalog's alter_config checks, without committing."""
    altered = meta.config.altered(changes)
    if altered.replication_factor != meta.config.replication_factor:
        raise InvalidRequest("replication.factor is set at creation and cannot be altered")
