"""Message and TopicPartition, with confluent-kafka's accessor methods."""

from __future__ import annotations

import base64
from typing import Any

from lakelog.client.errors import KafkaError

TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2
OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_INVALID = -1001

Headers = list[tuple[str, bytes | None]]


class Message:
    """A produced or consumed record. Keys, values and header values are bytes (None when absent)."""

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_headers", "_timestamp", "_error",
                 "_delivery_count")

    def __init__(self, topic: str, partition: int = -1, offset: int = OFFSET_INVALID, key: bytes | None = None,
                 value: bytes | None = None, headers: Headers | None = None, timestamp: int | None = None,
                 error: KafkaError | None = None, delivery_count: int | None = None) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers
        self._timestamp = timestamp
        self._error = error
        self._delivery_count = delivery_count

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> Headers | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        """(type, ms) as confluent-kafka; the HTTP API does not say which type, so CREATE_TIME when known."""
        if self._timestamp is None:
            return TIMESTAMP_NOT_AVAILABLE, -1
        return TIMESTAMP_CREATE_TIME, self._timestamp

    def error(self) -> KafkaError | None:
        return self._error

    def delivery_count(self) -> int | None:
        """How many times a share group delivered this record, this time included (None outside share groups)."""
        return self._delivery_count

    def __len__(self) -> int:
        return len(self._value or b"")

    def __repr__(self) -> str:
        return f"Message({self._topic}-{self._partition}@{self._offset}, key={self._key!r}, value={self._value!r})"


class TopicPartition:
    """(topic, partition) with an optional offset, as in confluent-kafka; hashable on (topic, partition)."""

    __slots__ = ("topic", "partition", "offset", "metadata")

    def __init__(self, topic: str, partition: int = -1, offset: int = OFFSET_INVALID,
                 metadata: str | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.metadata = metadata

    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicPartition) and self.key() == other.key() and self.offset == other.offset

    def __hash__(self) -> int:
        return hash(self.key())

    def __lt__(self, other: TopicPartition) -> bool:
        return self.key() < other.key()

    def __repr__(self) -> str:
        return f"TopicPartition({self.topic!r}, {self.partition}, {self.offset})"


def to_bytes(value: Any, what: str) -> bytes | None:
    """str is sent as UTF-8, bytes-like as is; anything else is the caller's to serialize."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be str or bytes (serialize it first), got {type(value).__name__}")


def normalize_headers(headers: Any) -> Headers | None:
    """A dict or a list of (key, value) pairs, as confluent-kafka takes them."""
    if headers is None:
        return None
    pairs = headers.items() if isinstance(headers, dict) else headers
    return [(str(k), to_bytes(v, f"header {k!r}")) for k, v in pairs]


def decode_field(raw: Any, encoding: str | None) -> bytes | None:
    """A fetched key or value asked for as base64 (or rendered as text/base64 where it had to be)."""
    if raw is None:
        return None
    if encoding == "string":
        return str(raw).encode("utf-8")
    return base64.b64decode(raw)


def from_fetched(record: dict[str, Any]) -> Message:
    """A record of a fetch or poll answer asked with key_format=base64 and value_format=base64."""
    headers: Headers = []
    for header in record.get("headers") or ():
        value = header.get("value")
        if value is not None:
            value = base64.b64decode(value) if header.get("value_encoding") == "base64" else value.encode("utf-8")
        headers.append((header["key"], value))
    return Message(record["topic"], record["partition"], record["offset"],
                   decode_field(record.get("key"), record.get("key_encoding")),
                   decode_field(record.get("value"), record.get("value_encoding")), headers,
                   record.get("timestamp"), delivery_count=record.get("delivery_count"))
