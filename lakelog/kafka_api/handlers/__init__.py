"""One coroutine per Kafka API: (context, call) -> response (None: no answer, as for acks=0)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from kafka.protocol.api_key import ApiKey

from lakelog.kafka_api import sasl
from lakelog.kafka_api.context import Context
from lakelog.kafka_api.handlers import (
    acls,
    admin,
    alter_configs,
    cluster,
    consumer_groups,
    fetch,
    groups,
    metadata,
    offset_delete,
    produce,
    records_admin,
    share_groups,
    share_offsets,
    transactions,
)
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
    ApiKey.OffsetDelete: offset_delete.offset_delete,
    ApiKey.AlterConfigs: alter_configs.alter_configs,
    ApiKey.DeleteRecords: records_admin.delete_records,
    ApiKey.DescribeLogDirs: records_admin.describe_log_dirs,
    ApiKey.DescribeProducers: records_admin.describe_producers,
    ApiKey.AddPartitionsToTxn: transactions.add_partitions_to_txn,
    ApiKey.AddOffsetsToTxn: transactions.add_offsets_to_txn,
    ApiKey.EndTxn: transactions.end_txn,
    ApiKey.TxnOffsetCommit: transactions.txn_offset_commit,
    ApiKey.DescribeTransactions: transactions.describe_transactions,
    ApiKey.ListTransactions: transactions.list_transactions,
    ApiKey.DescribeCluster: cluster.describe_cluster,
    ApiKey.DescribeAcls: acls.describe_acls,
    ApiKey.CreateAcls: acls.create_acls,
    ApiKey.DeleteAcls: acls.delete_acls,
    ApiKey.ConsumerGroupHeartbeat: consumer_groups.consumer_group_heartbeat,
    ApiKey.ConsumerGroupDescribe: consumer_groups.consumer_group_describe,
    ApiKey.ShareGroupHeartbeat: share_groups.share_group_heartbeat,
    ApiKey.ShareGroupDescribe: share_groups.share_group_describe,
    ApiKey.ShareFetch: share_groups.share_fetch,
    ApiKey.ShareAcknowledge: share_groups.share_acknowledge,
    ApiKey.DescribeShareGroupOffsets: share_offsets.describe_share_group_offsets,
    ApiKey.AlterShareGroupOffsets: share_offsets.alter_share_group_offsets,
    ApiKey.DeleteShareGroupOffsets: share_offsets.delete_share_group_offsets,
}
