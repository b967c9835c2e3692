"""The committer's node budget of table commits (platform/journal/pacing.py)."""

from __future__ import annotations

from hypothesis import given, strategies as st

from lakelog.platform.journal.pacing import CommitPacer, Due, commits_to_start


def test_no_limit_at_rate_zero() -> None:
    pacer = CommitPacer(0)
    assert pacer.allowance(0.0) >= 100_000
    pacer.spent(50)
    assert pacer.allowance(0.0) >= 100_000


def test_a_starting_node_may_commit_one_seconds_worth_then_waits_for_the_rate() -> None:
    pacer = CommitPacer(4)
    assert pacer.allowance(10.0) == 4
    pacer.spent(4)
    assert pacer.allowance(10.1) == 0  # 0.4 of a commit saved up
    assert pacer.allowance(10.25) == 1
    pacer.spent(1)
    assert pacer.allowance(100.0) == 4  # an idle minute saves up no more than a second's worth


def test_a_slow_rate_still_allows_one_commit() -> None:
    pacer = CommitPacer(0.5)
    assert pacer.allowance(0.0) == 1
    pacer.spent(1)
    assert pacer.allowance(1.0) == 0
    assert pacer.allowance(2.0) == 1


@given(rate=st.floats(0.2, 50), ticks=st.lists(st.floats(0.001, 0.5), min_size=1, max_size=300),
       demand=st.integers(0, 40))
def test_commits_started_never_exceed_the_rate_plus_one_seconds_worth(rate: float, ticks: list[float],
                                                                        demand: int) -> None:
    pacer, now, started = CommitPacer(rate), 0.0, 0
    for step in ticks:
        now += step
        take = min(demand, pacer.allowance(now))
        assert take >= 0
        pacer.spent(take)
        started += take
    assert started <= rate * now + max(1.0, rate) + 1e-9


def test_topics_due_by_bytes_always_start_and_the_longest_waiting_take_the_allowance() -> None:
    due = [Due("a", 12.0, False), Due("big", 0.1, True), Due("b", 30.0, False), Due("c", 11.0, False)]
    assert commits_to_start(due, 2) == ["big", "b", "a"]
    assert commits_to_start(due, 0) == ["big"]
    assert sorted(commits_to_start(due, 10)) == ["a", "b", "big", "c"]


def test_delay_is_zero_with_a_token_and_the_refill_time_without() -> None:
    pacer = CommitPacer(10)
    assert pacer.delay(0.0) == 0.0  # an idle node puts at once
    pacer.spent(10)
    assert abs(pacer.delay(0.0) - 0.1) < 1e-9  # one put's worth refills in 1/rate
    assert abs(pacer.delay(0.05) - 0.05) < 1e-9
    assert pacer.delay(0.1) == 0.0
    assert CommitPacer(0).delay(0.0) == 0.0  # no limit
