"""Subscription patterns: RE2, bounded length, compiled once."""

from __future__ import annotations

import pytest

from lakelog.platform.errors import InvalidRequest
from lakelog.platform.groups.membership import MAX_PATTERN_CHARS, compile_topic_pattern


def test_a_catastrophic_pattern_matches_in_linear_time() -> None:
    pattern = compile_topic_pattern(r"(\w|\w)*!")
    assert pattern.fullmatch("a" * 100_000) is None  # a backtracking engine would not return
    assert pattern.fullmatch("ab!") is not None


def test_full_match_semantics() -> None:
    pattern = compile_topic_pattern(r"orders-.*")
    assert pattern.fullmatch("orders-eu") and not pattern.fullmatch("old-orders-eu")


@pytest.mark.parametrize("bad,message", [(r"(a)\1", "backreferences"), (r"(?=a)", "lookaround"), ("(", "bad topic"),
                                         ("a" * (MAX_PATTERN_CHARS + 1), "limit is 1000")])
def test_refused(bad: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        compile_topic_pattern(bad)
