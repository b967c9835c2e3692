"""Share groups (KIP-932, queues): records handed out one by one to a group's members, acknowledged,
released or rejected one by one, their state durable in a Delta control table. See `coordinator.py`."""

from lakelog.platform.share.calls import Ack, Delivery, HeartbeatAnswer
from lakelog.platform.share.coordinator import ShareCoordinator
from lakelog.platform.share.holdings import group_owner
from lakelog.platform.share.partition import AckType, Acquired, RecordState, SharePartition

__all__ = ["Ack", "AckType", "Acquired", "Delivery", "HeartbeatAnswer", "RecordState", "ShareCoordinator",
           "SharePartition", "group_owner"]
