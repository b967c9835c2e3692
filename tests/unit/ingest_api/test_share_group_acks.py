"""`routes/share_groups.ack_batches`: HTTP acknowledgements, one per offset or a list, as the ranges the share
coordinator takes (consecutive offsets of one type per range); share groups' paths: the group segment kept
encoded, and in a cluster relayed to the group's coordinator."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from lakelog.ingest_api.cluster_routing import owned
from lakelog.ingest_api.errors import SchemaViolation
from lakelog.ingest_api.group_paths import encoded_group_path, group_id
from lakelog.ingest_api.routes.share_groups import ack_batches
from lakelog.ingest_api.share_models import ShareAck
from lakelog.platform.share import Ack


def ack(offsets: list[int] | int, kind: str = "accept", topic: str = "t", partition: int = 0) -> ShareAck:
    which = "offset" if isinstance(offsets, int) else "offsets"
    return ShareAck.model_validate({"topic": topic, "partition": partition, which: offsets, "type": kind})


def test_consecutive_offsets_of_one_type_are_one_range() -> None:
    assert ack_batches([ack([3, 1, 2]), ack(4)]) == [Ack("t", 0, 1, 4, (1,))]


def test_a_gap_or_another_type_starts_a_new_range() -> None:
    batches = ack_batches([ack([0, 1, 3]), ack(2, "reject"), ack([4, 5], "release")])
    assert batches == [Ack("t", 0, 0, 1, (1,)), Ack("t", 0, 2, 2, (3,)), Ack("t", 0, 3, 3, (1,)),
                       Ack("t", 0, 4, 5, (2,))]


def test_partitions_are_batched_apart_and_in_order() -> None:
    batches = ack_batches([ack([7], topic="b"), ack([5, 6], partition=1), ack([5, 6])])
    assert batches == [Ack("b", 0, 7, 7, (1,)), Ack("t", 0, 5, 6, (1,)), Ack("t", 1, 5, 6, (1,))]


def test_the_same_type_twice_is_one_ack_and_two_types_are_refused() -> None:
    assert ack_batches([ack([1, 2]), ack(2)]) == [Ack("t", 0, 1, 2, (1,))]
    with pytest.raises(SchemaViolation, match="twice"):
        ack_batches([ack(1), ack(1, "reject")])


def test_offset_or_offsets_exactly_once() -> None:
    with pytest.raises(SchemaViolation, match="offset or offsets"):
        ack_batches([ShareAck(topic="t", partition=0)])
    with pytest.raises(SchemaViolation, match="offset or offsets"):
        ack_batches([ShareAck(topic="t", partition=0, offset=1, offsets=[2])])


def test_share_group_paths_keep_the_group_segment_encoded() -> None:
    raw = f"/v1/share-groups/{quote('a/b', safe='')}/members/m/poll"
    path = encoded_group_path("/v1/share-groups/a/b/members/m/poll", raw.encode())
    segment, rest = path.removeprefix("/v1/share-groups/").split("/", 1)
    assert (group_id(segment), rest) == ("a/b", "members/m/poll")


def test_a_share_groups_requests_go_to_its_coordinator() -> None:
    found, classic = owned("/v1/share-groups/a%2Fb/members/m/poll"), owned("/v1/groups/a%2Fb")
    assert found is not None and classic is not None and (found.group, found.key) == ("a/b", classic.key)
    assert owned("/v1/share-groups") is None
