"""deadline.Deadline: one object, one error."""

from __future__ import annotations

import time

from lakelog.platform.deadline import Deadline
from lakelog.platform.errors import RequestTimedOut


def test_passed_and_remaining() -> None:
    later = Deadline.after_ms(60_000)
    assert not later.passed() and 59 < later.remaining_s() <= 60
    assert Deadline.after_ms(-1).passed()
    assert later.passed(time.monotonic() + 61)


def test_one_error_says_whether_anything_was_written() -> None:
    unknown = Deadline.after_ms(0).timed_out("no commit to 't'")
    refused = Deadline.after_ms(0).timed_out("the flush did not start", written=False)
    assert isinstance(unknown, RequestTimedOut) and unknown.retriable and unknown.code == "REQUEST_TIMED_OUT"
    assert "outcome is unknown" in unknown.message and "nothing was written" in refused.message


def test_earliest() -> None:
    a, b = Deadline(5.0), Deadline(3.0)
    assert Deadline.earliest([a, b]) is b
