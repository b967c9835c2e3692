"""Kafka messages kafka-python has no schema for (KIP-848's and KIP-932's), declared from JSON schema files in
this package.

Each class loads `<ClassName>.json` from here (kafka-python's `load_json`), so the codec is generated the
same way as kafka-python's own messages; `protocol.py` imports this module so its request and response
tables find them.
"""

from __future__ import annotations

import types
from typing import Any

from kafka.protocol.api_message import ApiMessage

PACKAGE = "lakelog.kafka_api.messages"


def _message(name: str, doc: str) -> Any:
    """`class <name>(ApiMessage, load_json=PACKAGE)`, its schema read from `<name>.json` in this package
    (made with `types.new_class`: the class keyword is the metaclass's, which type checkers do not follow)."""

    def body(namespace: dict[str, Any]) -> None:
        namespace.update(__module__=__name__, __qualname__=name, __doc__=doc)

    return types.new_class(name, (ApiMessage,), {"load_json": PACKAGE}, body)


ConsumerGroupHeartbeatRequest = _message(
    "ConsumerGroupHeartbeatRequest",
    "KIP-848's member heartbeat: join (epoch 0), heartbeat, leave (epoch -1, or -2 for a static member).")
ConsumerGroupHeartbeatResponse = _message(
    "ConsumerGroupHeartbeatResponse",
    "The member's id, epoch, heartbeat interval and (when it changed) its assignment by topic id.")
ConsumerGroupDescribeRequest = _message("ConsumerGroupDescribeRequest", "Describe consumer-protocol groups.")
ConsumerGroupDescribeResponse = _message(
    "ConsumerGroupDescribeResponse", "Each group's state, epochs, assignor and members with their assignments.")


# KIP-932's share groups, at the versions Kafka 4.2 serves (librdkafka's ShareConsumer sends v1).
ShareGroupHeartbeatRequest = _message(
    "ShareGroupHeartbeatRequest", "A share-group member's heartbeat: join (epoch 0), heartbeat, leave (epoch -1).")
ShareGroupHeartbeatResponse = _message(
    "ShareGroupHeartbeatResponse", "The member's id, epoch, heartbeat interval and (when it changed) its assignment.")
ShareGroupDescribeRequest = _message("ShareGroupDescribeRequest", "Describe share groups.")
ShareGroupDescribeResponse = _message("ShareGroupDescribeResponse", "Each share group's state, epochs and members.")
ShareFetchRequest = _message(
    "ShareFetchRequest", "Acknowledge what was delivered, then acquire and fetch records for a share-group member.")
ShareFetchResponse = _message(
    "ShareFetchResponse", "Per partition: the records, the acquired offset ranges with their delivery counts, and "
    "how the acknowledgements went.")
ShareAcknowledgeRequest = _message(
    "ShareAcknowledgeRequest", "Acknowledge delivered records (accept, release, reject).")
ShareAcknowledgeResponse = _message("ShareAcknowledgeResponse", "Per partition: how the acknowledgements went.")
DescribeShareGroupOffsetsRequest = _message(
    "DescribeShareGroupOffsetsRequest", "The share-partitions' start offsets of share groups.")
DescribeShareGroupOffsetsResponse = _message(
    "DescribeShareGroupOffsetsResponse", "Each share-partition's start offset.")
AlterShareGroupOffsetsRequest = _message(
    "AlterShareGroupOffsetsRequest", "Set share-partitions' start offsets (the group must be empty).")
AlterShareGroupOffsetsResponse = _message("AlterShareGroupOffsetsResponse", "Per partition: the outcome.")
DeleteShareGroupOffsetsRequest = _message(
    "DeleteShareGroupOffsetsRequest", "Forget a share group's state of topics (the group must be empty).")
DeleteShareGroupOffsetsResponse = _message("DeleteShareGroupOffsetsResponse", "Per topic: the outcome.")

__all__ = ["AlterShareGroupOffsetsRequest", "AlterShareGroupOffsetsResponse", "ConsumerGroupDescribeRequest",
           "ConsumerGroupDescribeResponse", "ConsumerGroupHeartbeatRequest", "ConsumerGroupHeartbeatResponse",
           "DeleteShareGroupOffsetsRequest", "DeleteShareGroupOffsetsResponse", "DescribeShareGroupOffsetsRequest",
           "DescribeShareGroupOffsetsResponse", "ShareAcknowledgeRequest", "ShareAcknowledgeResponse",
           "ShareFetchRequest", "ShareFetchResponse", "ShareGroupDescribeRequest", "ShareGroupDescribeResponse",
           "ShareGroupHeartbeatRequest", "ShareGroupHeartbeatResponse"]
