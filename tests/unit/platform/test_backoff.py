"""The wait between attempts of an optimistic change: random up to a cap that doubles, never past the cap."""

from lakelog.platform.backoff import backoff_s


def test_the_cap_doubles_per_attempt_up_to_its_limit() -> None:
    at_most = [backoff_s(attempt, base_s=0.01, cap_s=0.5, draw=lambda: 1.0) for attempt in range(8)]
    assert at_most == [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.5, 0.5]


def test_the_wait_is_a_random_share_of_the_cap() -> None:
    assert backoff_s(3, base_s=0.01, cap_s=0.5, draw=lambda: 0.25) == 0.02
    assert backoff_s(3, base_s=0.01, cap_s=0.5, draw=lambda: 0.0) == 0.0


def test_a_huge_attempt_number_stays_at_the_cap() -> None:
    assert backoff_s(10_000, base_s=0.01, cap_s=0.5, draw=lambda: 1.0) == 0.5
