"""One coroutine per Kafka API: (context, call) -> response (None: no answer, as for acks=0)."""

from __future__ import annotations

from typing import Awaitable, Callable

from kafka.protocol.api_key import ApiKey

from lakelog.kafka_api import sasl
from lakelog.kafka_api.context import Context
from lakelog.kafka_api.handlers import admin, fetch, groups, metadata, produce
from lakelog.kafka_api.protocol import Call

Handler = Callable[[Context, Call], Awaitable[object]]

HANDLERS: dict[int, Handler] = {
    ApiKey.ApiVersions: metadata.api_versions,
    ApiKey.Metadata: metadata.metadata,
    ApiKey.FindCoordinator: metadata.find_coordinator,
    ApiKey.Produce: produce.produce,
    ApiKey.InitProducerId: produce.init_producer_id,
    ApiKey.Fetch: fetch.fetch,
    ApiKey.ListOffsets: fetch.list_offsets,
    ApiKey.SaslHandshake: sasl.handshake,
    ApiKey.SaslAuthenticate: sasl.authenticate,
    ApiKey.CreateTopics: admin.create_topics,
    ApiKey.DeleteTopics: admin.delete_topics,
    ApiKey.CreatePartitions: admin.create_partitions,
    ApiKey.DescribeConfigs: admin.describe_configs,
    ApiKey.IncrementalAlterConfigs: admin.incremental_alter_configs,
    ApiKey.JoinGroup: groups.join_group,
    ApiKey.SyncGroup: groups.sync_group,
    ApiKey.Heartbeat: groups.heartbeat,
    ApiKey.LeaveGroup: groups.leave_group,
    ApiKey.OffsetCommit: groups.offset_commit,
    ApiKey.OffsetFetch: groups.offset_fetch,
    ApiKey.ListGroups: groups.list_groups,
    ApiKey.DescribeGroups: groups.describe_groups,
    ApiKey.DeleteGroups: groups.delete_groups,
}
