"""A topic's incarnation: a table opened for a topic is replaced once the catalog shows the name deleted or
created again (catalog.replaced), and Kafka's topic id is one per incarnation (TopicMeta.topic_id)."""

from __future__ import annotations

import uuid

from lakelog.platform.catalog.catalog import TopicMeta, replaced
from lakelog.platform.catalog.topic_config import parse_topic_config


def meta(name: str = "t", created_ms: int = 1000, partitions: int = 1, revision: int = 1) -> TopicMeta:
    return TopicMeta(name, partitions, parse_topic_config(None), revision, created_ms, created_ms + revision)


def test_replaced_when_deleted_or_created_again() -> None:
    opened = meta()
    assert not replaced(opened, opened)
    assert not replaced(opened, meta(partitions=4, revision=7))  # altered, partitions added: the same topic
    assert replaced(opened, None)  # deleted
    assert replaced(opened, meta(created_ms=2000))  # deleted and created again


def test_topic_id_is_one_per_incarnation_the_same_on_every_node() -> None:
    first = meta().topic_id
    assert isinstance(first, uuid.UUID) and first.int not in (0, 1)  # Kafka's zero and metadata ids are reserved
    assert meta(partitions=4, revision=9).topic_id == first  # a change keeps the id
    assert meta(created_ms=1001).topic_id != first  # the name created again gets a new one
    assert meta(name="u").topic_id != first
