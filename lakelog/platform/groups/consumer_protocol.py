"""The "consumer" protocol's embedded formats (ConsumerProtocolSubscription and ConsumerProtocolAssignment),
read for descriptions (HTTP, CLI): the topics a member subscribes to, the partitions it was assigned.

Pure functions of bytes; any thread may call them.
"""

from __future__ import annotations

import struct


def consumer_subscription(data: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription (version, [topic], ...); [] when unreadable."""
    try:
        count, pos = _int32(data, 2)
        topics = []
        for _ in range(count):
            topic, pos = _string(data, pos)
            topics.append(topic)
        return topics
    except (struct.error, UnicodeDecodeError, ValueError):
        return []


def consumer_assignment(data: bytes) -> list[tuple[str, int]]:
    """The partitions of a ConsumerProtocolAssignment (version, [topic, [partition]], ...); [] when
    unreadable."""
    try:
        count, pos = _int32(data, 2)
        partitions = []
        for _ in range(count):
            topic, pos = _string(data, pos)
            n, pos = _int32(data, pos)
            partitions += [(topic, p) for p in struct.unpack_from(f">{n}i", data, pos)]
            pos += 4 * n
        return sorted(partitions)
    except (struct.error, UnicodeDecodeError, ValueError):
        return []


def _int32(data: bytes, pos: int) -> tuple[int, int]:
    value = struct.unpack_from(">i", data, pos)[0]
    if value < 0 or value > len(data):
        raise ValueError("bad count")
    return value, pos + 4


def _string(data: bytes, pos: int) -> tuple[str, int]:
    size = struct.unpack_from(">h", data, pos)[0]
    if size < 0:
        raise ValueError("null string")
    return data[pos + 2:pos + 2 + size].decode(), pos + 2 + size
