"""A membership view's owner of a key: the rendezvous owner among its nodes (ownership.py), asked on every
produce call, so remembered per view; a node alone owns every key."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lakelog.platform.cluster.membership import Node, View
from lakelog.platform.cluster.ownership import owner, topic_key

NODE_IDS = st.lists(st.text("abcdef0123", min_size=1, max_size=6), min_size=1, max_size=5, unique=True)


@given(NODE_IDS, st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=20))
def test_the_view_names_the_rendezvous_owner_asked_once_or_again(node_ids: list[str], topics: list[str]) -> None:
    nodes = tuple(Node(node_id, f"http://{node_id}:1") for node_id in sorted(node_ids))
    view = View(nodes[0], nodes)
    for key in [topic_key(t) for t in topics] * 2:  # the second time from the memo
        assert view.owner(key).node_id == owner(key, list(node_ids))


def test_a_node_alone_owns_every_key() -> None:
    alone = Node("n1", "http://n1:1")
    view = View(alone, (alone,))
    assert {view.owner(topic_key(t)) for t in ("a", "b", "c")} == {alone}
    assert view.is_local(view.owner(topic_key("a")))
