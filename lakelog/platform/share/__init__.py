"""Share groups (KIP-932, queues): records handed out one by one to a group's members, acknowledged,
released or rejected one by one, their state durable in a Delta control table. See `coordinator.py`."""

from lakelog.platform.share.coordinator import Ack, Delivery, HeartbeatAnswer, ShareCoordinator
from lakelog.platform.share.partition import AckType, Acquired, RecordState, SharePartition

__all__ = ["Ack", "AckType", "Acquired", "Delivery", "HeartbeatAnswer", "RecordState", "ShareCoordinator",
           "SharePartition"]
