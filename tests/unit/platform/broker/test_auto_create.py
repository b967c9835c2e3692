"""auto_create: which names are created on first use, who may create them, the partitions a produce call
needs, and a creation that lost a race answering the winner's topic."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakelog.platform.broker import auto_create
from lakelog.platform.acl import CLUSTER, Authorizer, TopicAuthorizationFailed
from lakelog.platform.catalog.catalog import TopicMeta
from lakelog.platform.errors import InvalidTopic, TopicAlreadyExists, UnknownTopicOrPartition
from lakelog.platform.records import RecordColumns
from lakelog.platform.catalog.topic_config import parse_topic_config


class FakeStore:
    def __init__(self, *acls: tuple[str, str, str, str]) -> None:
        self.acls = set(acls)
        self.generation = 0

    def allowed(self, principal: str, operation: str, resource_type: str, name: str) -> bool:
        return (principal, operation, resource_type, name) in self.acls


class FakeCatalog:
    def __init__(self) -> None:
        self.topics: dict[str, TopicMeta] = {}

    def get(self, name: str) -> TopicMeta:
        if name not in self.topics:
            raise UnknownTopicOrPartition(f"unknown topic {name!r}")
        return self.topics[name]


class FakeBroker:
    """create_topic as the catalog answers it; `winner` is a topic another node created first."""

    def __init__(self, winner: TopicMeta | None = None, replicas: Any = None) -> None:
        self.catalog = FakeCatalog()
        self.winner = winner
        self.replicas = replicas
        self.created: list[tuple[str, int, Any]] = []
        self.being_deleted = False  # the name's former table is still being deleted: no topic, no create

    def create_topic(self, name: str, partitions: int, config: Any = None) -> TopicMeta:
        if self.being_deleted:
            raise TopicAlreadyExists(f"topic {name!r} is marked for deletion")
        if self.winner is not None:
            self.catalog.topics[name] = self.winner
            raise TopicAlreadyExists(f"topic {name!r} already exists")
        self.created.append((name, partitions, config))
        meta = TopicMeta(name, partitions, parse_topic_config(config), 1, 0, 0)
        self.catalog.topics[name] = meta
        return meta


def anyone() -> Authorizer:
    return Authorizer(None, {})  # no keys: everyone is a super user


def create(broker: Any, authorizer: Authorizer, name: str = "t", partitions: int = 3, **kwargs: Any) -> TopicMeta:
    return auto_create.create_on_first_use(broker, authorizer, "bob", name, partitions, 2, **kwargs)


@pytest.mark.parametrize("name,expected", [
    ("orders", True), ("a.b_c-1", True), ("_schemas", True),
    ("__consumer_offsets", False), ("__transaction_state", False), ("__anything", False),
    ("", False), ("..", False), ("bad name", False), ("x" * 250, False), ("é", False),
])
def test_creatable_names(name: str, expected: bool) -> None:
    assert auto_create.creatable(name) is expected


def test_create_on_the_cluster_or_on_the_topic() -> None:
    on_topic = Authorizer(FakeStore(("bob", "create", "topic", "t")), {"k": "bob"})  # type: ignore[arg-type]
    assert auto_create.may_create(on_topic, "bob", "t") and not auto_create.may_create(on_topic, "bob", "u")
    on_cluster = Authorizer(FakeStore(("bob", "create", "cluster", CLUSTER)), {"k": "bob"})  # type: ignore[arg-type]
    assert auto_create.may_create(on_cluster, "bob", "anything")
    nothing = Authorizer(FakeStore(("bob", "write", "topic", "t")), {"k": "bob"})  # type: ignore[arg-type]
    assert not auto_create.may_create(nothing, "bob", "t")


def test_highest_partition_of_columns_and_arrow() -> None:
    assert auto_create.highest_partition(RecordColumns([None], [b"v"])) == -1
    assert auto_create.highest_partition(RecordColumns([None] * 3, [b"v"] * 3, partitions=[None, 4, 1])) == 4
    assert auto_create.highest_partition(pa.table({"value": [b"v"]})) == -1
    assert auto_create.highest_partition(pa.table({"value": [b"v", b"w"], "partition": [2, None]})) == 2


def test_creates_with_the_partitions_given_and_no_replication_factor_without_sites() -> None:
    broker = FakeBroker()
    meta = create(broker, anyone())
    assert (meta.name, meta.partitions) == ("t", 3)
    assert broker.created == [("t", 3, None)]


def test_replication_factor_with_replica_sites() -> None:
    broker = FakeBroker(replicas=object())
    create(broker, anyone())
    assert broker.created == [("t", 3, {"replication.factor": 2})]


def test_a_lost_race_answers_the_winners_topic() -> None:
    winner = TopicMeta("t", 5, parse_topic_config(None), 1, 0, 0)
    assert create(FakeBroker(winner=winner), anyone()) is winner


def test_refusals_create_nothing() -> None:
    broker = FakeBroker()
    denied = Authorizer(FakeStore(("bob", "write", "topic", "t")), {"k": "bob"})  # type: ignore[arg-type]
    with pytest.raises(TopicAuthorizationFailed, match="may not create"):
        create(broker, denied)
    with pytest.raises(UnknownTopicOrPartition, match="partition 3"):
        create(broker, anyone(), least_partitions=4)
    with pytest.raises(InvalidTopic):
        create(broker, anyone(), name="__consumer_offsets")
    assert broker.created == []


def test_a_former_table_still_being_deleted_is_refused_as_such() -> None:
    broker = FakeBroker()
    broker.being_deleted = True
    with pytest.raises(TopicAlreadyExists, match="marked for deletion"):  # not a lost race: no topic to answer
        create(broker, anyone())
