"""Arrow schemas of the topic and control tables."""

from lakelog.schemas.tables import (
    CATALOG_SCHEMA,
    CONSUMER_OFFSETS_SCHEMA,
    HEADERS_TYPE,
    TOPIC_FILE_SCHEMA,
    TOPIC_SCHEMA,
)

__all__ = ["CATALOG_SCHEMA", "CONSUMER_OFFSETS_SCHEMA", "HEADERS_TYPE", "TOPIC_FILE_SCHEMA", "TOPIC_SCHEMA"]
