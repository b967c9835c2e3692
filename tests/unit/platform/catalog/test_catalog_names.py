"""A name no topic has (platform/catalog/catalog.py): InvalidTopic (Kafka's INVALID_TOPIC_EXCEPTION) for a name no
topic can have, UnknownTopicOrPartition for a legal one; the catalog is not read again for an illegal one."""

from __future__ import annotations

import tempfile

import pytest

from lakelog.platform.catalog.catalog import Catalog, missing_topic
from lakelog.platform.errors import InvalidTopic, UnknownTopicOrPartition
from lakelog.platform.storage import Storage

ILLEGAL = ["", ".", "..", "x" * 250, "bad name", "0057-invalid_topic$#!", "slash/name", "ünïcode", None]


@pytest.mark.parametrize("name", ILLEGAL)
def test_an_illegal_name_is_invalid(name) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(missing_topic(name), InvalidTopic)


@pytest.mark.parametrize("name", ["orders", "a.b_c-9", "x" * 249, "...", "__consumer_offsets"])
def test_a_legal_name_is_unknown(name: str) -> None:
    missing = missing_topic(name)
    assert isinstance(missing, UnknownTopicOrPartition) and repr(name) in missing.message


def test_get_refuses_an_illegal_name_without_reading_the_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    with tempfile.TemporaryDirectory() as root:
        catalog = Catalog(Storage.open(root))
        catalog.create_topic("orders", 1)
        refreshes: list[None] = []
        monkeypatch.setattr(catalog, "refresh", lambda: refreshes.append(None))
        with pytest.raises(InvalidTopic):
            catalog.get("bad name")
        assert refreshes == []
        with pytest.raises(UnknownTopicOrPartition):
            catalog.get("missing")
        assert len(refreshes) == 1  # a legal name may have been created by another node since
        assert catalog.get("orders").name == "orders"
