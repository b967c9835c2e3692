"""job_runs.prune_cutoff: when the record of job runs is pruned, and from where."""

from __future__ import annotations

import pytest

from lakelog.platform.ops.job_runs import DEFAULT_RETENTION_MS, prune_cutoff

DAY = 86_400_000
NOW = 1_800_000_000_000
WEEK = 7 * DAY


def test_the_default_retention_is_a_week() -> None:
    assert DEFAULT_RETENTION_MS == WEEK


@pytest.mark.parametrize("oldest_age,due", [
    (0, False),                  # nothing old
    (WEEK, False),               # exactly at the retention: kept
    (WEEK + WEEK // 10, False),  # a tenth past it: still waiting, so that one delete takes many rounds
    (WEEK + WEEK // 10 + 1, True),
    (30 * DAY, True),
])
def test_a_prune_is_due_a_tenth_of_the_retention_past_it(oldest_age: int, due: bool) -> None:
    cutoff = prune_cutoff(NOW - oldest_age, NOW, WEEK)
    assert cutoff == (NOW - WEEK if due else None)  # what goes is what is past the retention, no more


def test_no_statistics_prunes_and_minus_one_keeps_everything() -> None:
    assert prune_cutoff(None, NOW, WEEK) == NOW - WEEK
    assert prune_cutoff(None, NOW, -1) is None
    assert prune_cutoff(NOW - 365 * DAY, NOW, -1) is None


def test_a_zero_retention_drops_every_earlier_run() -> None:
    assert prune_cutoff(NOW - 1, NOW, 0) == NOW
    assert prune_cutoff(NOW, NOW, 0) is None
