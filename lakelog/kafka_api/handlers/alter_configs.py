"""AlterConfigs (API 33): Kafka's original config change, which replaces a resource's whole config.

KafkaJS, sarama and clients older than IncrementalAlterConfigs change configs only this way. The entries
given become the topic's config and every key not given goes back to its default, as in Kafka (a client
that means to keep a value sends it again). `replication.factor` is set at creation: it keeps its value
unless given, and given it must be the same. Each resource is answered with its own error; a refused
resource changes nothing; validate_only checks without changing anything. The catalog applies the whole
config in one compare-and-set, so a concurrent change of another key is replaced too, as Kafka's is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeAlias

from kafka.protocol.admin import AlterConfigsResponse

from lakelog.kafka_api.context import Context
from lakelog.kafka_api.handlers.admin import (  # the same per-item machinery as the other config APIs
    DEFAULTS,
    READ_ONLY_KEYS,
    alterable_topic,
    answer_codes,
    current_topic,
    duplicate_in_request,
    each_item,
    validate_alter,
)
from lakelog.kafka_api.protocol import Call
from lakelog.kafka_api.threads import blocking
from lakelog.platform.broker.node import Broker
from lakelog.platform.catalog.topic_config import KNOWN_KEYS
from lakelog.platform.errors import InvalidConfig

AlteredResource: TypeAlias = AlterConfigsResponse.AlterConfigsResourceResponse


async def alter_configs(context: Context, call: Call) -> AlterConfigsResponse:
    request = call.body
    outcomes = await each_item(request.resources, lambda r: (r.resource_type, r.resource_name), "config resource",
                           lambda r: _replace(context, r, request.validate_only))
    results = [AlteredResource(resource_type=r.resource_type, resource_name=r.resource_name, **answer_codes(error))
               for r, (_, error) in zip(request.resources, outcomes)]
    return AlterConfigsResponse(throttle_time_ms=0, responses=results)


async def _replace(context: Context, resource: Any, validate_only: bool) -> None:
    name = alterable_topic(context, resource)
    config = replaced_config(resource.configs)  # refused before any storage I/O
    await blocking(_apply, context.services.broker, name, config, validate_only)


def replaced_config(entries: Iterable[Any]) -> dict[str, Any]:
    """The topic's whole config after an AlterConfigs of these entries (name, value): Kafka's default for
    every key not given (a null value too), the value given otherwise. Read-only keys not given are left
    out, so they keep their value."""
    given: dict[str, str | None] = {}
    for entry in entries:
        if entry.name in given:
            raise duplicate_in_request("config", entry.name)
        if entry.name not in KNOWN_KEYS:
            raise InvalidConfig(f"unknown config key {entry.name!r}; known keys: {', '.join(sorted(KNOWN_KEYS))}")
        given[entry.name] = entry.value
    config: dict[str, Any] = {key: value for key, value in DEFAULTS.items() if key not in READ_ONLY_KEYS}
    config.update((key, value) for key, value in given.items() if value is not None)
    return config


def _apply(broker: Broker, name: str, config: dict[str, Any], validate_only: bool) -> None:
    if validate_only:
        validate_alter(current_topic(broker, name), config)
    else:
        broker.alter_topic_config(name, config)
