"""Rendezvous ownership: every node computes the same owner, owners spread, and a change of nodes moves
only the keys it must."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakelog.platform.cluster.ownership import group_key, owner, topic_key

NODE_IDS = st.lists(st.text("abcdef0123456789", min_size=1, max_size=8), min_size=1, max_size=6, unique=True)


@given(NODE_IDS, st.text(max_size=20))
def test_the_owner_does_not_depend_on_the_order_nodes_are_listed_in(nodes: list[str], key: str) -> None:
    assert owner(key, nodes) == owner(key, list(reversed(nodes))) == owner(key, sorted(nodes))
    assert owner(key, nodes) in nodes


@given(NODE_IDS, st.text(min_size=1, max_size=8), st.lists(st.text(max_size=12), min_size=1, max_size=40))
def test_a_node_joining_takes_keys_only_for_itself(nodes: list[str], joining: str, keys: list[str]) -> None:
    if joining in nodes:
        return
    for key in keys:
        after = owner(key, [*nodes, joining])
        assert after in (owner(key, nodes), joining)


@given(NODE_IDS, st.lists(st.text(max_size=12), min_size=1, max_size=40))
def test_a_node_leaving_moves_only_its_own_keys(nodes: list[str], keys: list[str]) -> None:
    if len(nodes) < 2:
        return
    leaving, rest = nodes[0], nodes[1:]
    for key in keys:
        if owner(key, nodes) != leaving:
            assert owner(key, rest) == owner(key, nodes)


def test_topics_spread_evenly_over_three_nodes() -> None:
    counts = Counter(owner(topic_key(f"topic-{i}"), ["n1", "n2", "n3"]) for i in range(3000))
    assert set(counts) == {"n1", "n2", "n3"}
    assert min(counts.values()) > 850  # 1,000 each expected


def test_a_topic_and_a_group_of_one_name_are_different_keys() -> None:
    nodes = [f"n{i}" for i in range(8)]
    assert sum(owner(topic_key(f"x{i}"), nodes) != owner(group_key(f"x{i}"), nodes) for i in range(200)) > 100


def test_no_live_node_is_an_error() -> None:
    with pytest.raises(ValueError):
        owner("topic:t", [])
