"""DescribeCluster (API 60): the brokers, the cluster id and the controller, as Metadata names them.

Admin clients (the Java AdminClient's describeCluster, kafka-python's describe_cluster) use it instead of
Metadata. lakelog has no controller: the node answering names itself, as in Metadata. Asked for, the
caller's authorized operations on the cluster are its lakelog rights there (Kafka's operation numbers).
"""

from __future__ import annotations

from typing import TypeAlias

from kafka.protocol.admin import DescribeClusterResponse

from lakelog.kafka_api import nodes
from lakelog.kafka_api.context import Context
from lakelog.kafka_api.errors import CODES
from lakelog.kafka_api.protocol import Call
from lakelog.platform.acl import CLUSTER

ClusterBroker: TypeAlias = DescribeClusterResponse.DescribeClusterBroker
BROKERS, CONTROLLERS = 1, 2  # endpoint types (v1+)
# Kafka's AclOperation numbers of the operations lakelog's ACLs know.
OPERATIONS = {"read": 3, "write": 4, "create": 5, "delete": 6, "alter": 7, "describe": 8}


async def describe_cluster(context: Context, call: Call) -> DescribeClusterResponse:
    request = call.body
    cluster_id = context.services.settings.kafka_cluster_id
    if call.version >= 1 and request.endpoint_type != BROKERS:  # lakelog has no controllers to name
        return DescribeClusterResponse(throttle_time_ms=0, error_code=CODES["UNSUPPORTED_ENDPOINT_TYPE"],
                                       error_message="lakelog has brokers only (endpoint type 1)",
                                       endpoint_type=request.endpoint_type, cluster_id=cluster_id, controller_id=-1,
                                       brokers=[], authorized_operations=None)
    brokers = [ClusterBroker(broker_id=b.broker_id, host=b.host, port=b.port, rack=None, is_fenced=False)
               for b in nodes.brokers(context)]
    operations = cluster_operations(context) if request.include_cluster_authorized_operations else None
    return DescribeClusterResponse(throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=BROKERS,
                                   cluster_id=cluster_id, controller_id=nodes.local(context).broker_id,
                                   brokers=brokers, authorized_operations=operations)


def cluster_operations(context: Context) -> set[int]:
    """Kafka's numbers of the operations the caller may perform on the cluster."""
    return {number for name, number in OPERATIONS.items() if context.allowed(name, "cluster", CLUSTER)}
