"""groups.assignors: range, roundrobin and cooperative-sticky, as Kafka's clients assign."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lakelog.platform.groups.assignors import range_assign, roundrobin_assign, sticky_assign

ALL = frozenset({"a", "b"})


def test_range_gives_the_first_members_one_more() -> None:
    out = range_assign({"m1": ALL, "m2": ALL}, {"a": 3, "b": 2}, {})
    assert out == {"m1": {("a", 0), ("a", 1), ("b", 0)}, "m2": {("a", 2), ("b", 1)}}


def test_roundrobin_deals_in_turn() -> None:
    out = roundrobin_assign({"m1": ALL, "m2": ALL}, {"a": 3, "b": 2}, {})
    assert out == {"m1": {("a", 0), ("a", 2), ("b", 1)}, "m2": {("a", 1), ("b", 0)}}


def test_only_subscribed_topics_are_assigned() -> None:
    out = roundrobin_assign({"m1": frozenset({"a"}), "m2": frozenset({"b"})}, {"a": 2, "b": 1}, {})
    assert out == {"m1": {("a", 0), ("a", 1)}, "m2": {("b", 0)}}


members = st.lists(st.sampled_from(["m1", "m2", "m3", "m4"]), min_size=1, max_size=4, unique=True)
counts = st.fixed_dictionaries({"a": st.integers(0, 9), "b": st.integers(0, 9)})


@given(members, counts)
def test_every_assignor_covers_every_partition_once_and_balances(ms: list[str], cs: dict[str, int]) -> None:
    subscriptions = {m: ALL for m in ms}
    wanted = {(t, p) for t, n in cs.items() for p in range(n)}
    for assign in (range_assign, roundrobin_assign, sticky_assign):
        out = assign(subscriptions, cs, {})
        owned = [tp for tps in out.values() for tp in tps]
        assert sorted(owned) == sorted(wanted), assign.__name__
    sizes = [len(v) for v in sticky_assign(subscriptions, cs, {}).values()]
    assert max(sizes) - min(sizes) <= 1


@given(members, members, counts)
def test_sticky_moves_only_what_balance_needs(before: list[str], after: list[str], cs: dict[str, int]) -> None:
    first = sticky_assign({m: ALL for m in before}, cs, {})
    owned = {m: first.get(m, set()) for m in after}
    second = sticky_assign({m: ALL for m in after}, cs, owned)
    total = sum(cs.values())
    fair = -(-total // len(after))  # no member keeps more than a balanced share
    kept = sum(len(second[m] & owned[m]) for m in after)
    assert kept >= sum(min(len(owned[m]), total // len(after)) for m in after)
    assert all(len(second[m]) <= fair for m in after)
