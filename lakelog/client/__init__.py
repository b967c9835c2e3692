"""A Python client for lakelog's HTTP API, named as confluent-kafka names things.

    from lakelog.client import Producer, Consumer, ShareConsumer, AdminClient

It talks HTTP only (httpx): no server or core imports, so it runs wherever the API is reachable.
"""

from lakelog.client.admin import AdminClient
from lakelog.client.consumer import Consumer
from lakelog.client.errors import KafkaError, KafkaException
from lakelog.client.message import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Message,
    TopicPartition,
)
from lakelog.client.producer import Producer
from lakelog.client.share_consumer import AcknowledgeType, ShareConsumer

__all__ = [
    "AcknowledgeType", "AdminClient", "Consumer", "KafkaError", "KafkaException", "Message", "OFFSET_BEGINNING",
    "OFFSET_END", "OFFSET_INVALID", "Producer", "ShareConsumer", "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE", "TopicPartition",
]
