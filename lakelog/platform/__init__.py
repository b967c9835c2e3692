"""The log core: catalog, partitioner, topic logs, produce, fetch, consumer groups.

Imports neither FastAPI nor PySpark; the HTTP tier and the Spark jobs use it.
"""

from lakelog.platform.broker.node import Broker, TopicDescription, parse_acks
from lakelog.platform.catalog.catalog import TopicMeta
from lakelog.platform.catalog.topic_config import TopicConfig, parse_topic_config
from lakelog.platform.records import ConsumerRecord, FetchResult, ProducerBatch, ProduceResult, Record
from lakelog.platform.storage import Storage

__all__ = [
    "Broker", "ConsumerRecord", "FetchResult", "ProduceResult", "ProducerBatch", "Record", "Storage",
    "TopicConfig", "TopicDescription", "TopicMeta", "parse_acks", "parse_topic_config",
]
