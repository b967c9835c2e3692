"""Kafka messages kafka-python has no schema for, declared from JSON schema files in this package.

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

__all__ = ["ConsumerGroupDescribeRequest", "ConsumerGroupDescribeResponse", "ConsumerGroupHeartbeatRequest",
           "ConsumerGroupHeartbeatResponse"]
