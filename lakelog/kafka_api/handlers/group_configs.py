"""Group configs: DescribeConfigs and IncrementalAlterConfigs on a GROUP resource (type 32), Kafka 4's way to
set a share group's `share.*` configs (and lakelog's `errors.deadletterqueue.topic.name` for it). The share
coordinator checks and keeps them (`platform/share/config.py`); a refused config changes nothing.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from kafka.protocol.admin import DescribeConfigsResponse

from lakelog.kafka_api.context import Context
from lakelog.kafka_api.handlers.groups import check_group_served
from lakelog.kafka_api.threads import blocking
from lakelog.platform.errors import InvalidConfig, InvalidRequest
from lakelog.platform.share import config as share_config

DescribedConfig: TypeAlias = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
GROUP = 32
SET, DELETE = 0, 1
GROUP_CONFIG, DEFAULT_CONFIG = 8, 5  # Kafka's ConfigSource: DYNAMIC_GROUP_CONFIG, DEFAULT_CONFIG
STRING, INT = 2, 3
INTS = {share_config.LOCK_DURATION, share_config.DELIVERY_LIMIT}


async def alter(context: Context, resource: Any, validate_only: bool) -> None:
    group = resource.resource_name
    check_group_served(context, group, "alter")
    changes: dict[str, str | None] = {}
    for op in resource.configs:
        if op.name in changes:
            raise InvalidRequest(f"config {op.name!r} is given twice")
        if op.config_operation not in (SET, DELETE):
            raise InvalidConfig(f"config {op.name!r}: group configs take SET and DELETE only")
        changes[op.name] = op.value if op.config_operation == SET else None
        if op.config_operation == SET and op.value is None:
            raise InvalidConfig(f"config {op.name!r}: SET needs a value (DELETE resets to the default)")
    for name, value in changes.items():
        share_config.check(name, value)
    if not validate_only and changes:
        shares = await blocking(context.services.shares)
        await blocking(shares.set_configs, group, changes)


async def describe(context: Context, resource: Any) -> list[Any]:
    group = resource.resource_name
    check_group_served(context, group, "describe")
    shares = await blocking(context.services.shares)
    overrides = dict(shares.configs.get(group, {}))
    defaults = share_config.defaults(context.services.settings)
    keys = resource.configuration_keys
    return [DescribedConfig(name=name, value=overrides.get(name, default), read_only=False,
                            config_source=GROUP_CONFIG if name in overrides else DEFAULT_CONFIG,
                            is_default=name not in overrides, is_sensitive=False, synonyms=[],
                            config_type=INT if name in INTS else STRING, documentation=None)
            for name, default in defaults.items() if keys is None or name in keys]
