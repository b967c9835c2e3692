"""A produce request's deadline: one object from the door to the commit, and one error when it passes.

Produce never blocks without bound: the writer's reaper answers a caller whose deadline passed, and
the log stops retrying a commit at the same deadline, both with REQUEST_TIMED_OUT (retriable: the
outcome is unknown, and an idempotent retry gets the original offsets if the commit landed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from lakelog.platform.errors import RequestTimedOut


@dataclass(frozen=True)
class Deadline:
    at: float  # time.monotonic() seconds

    @classmethod
    def after_ms(cls, ms: float) -> Deadline:
        return cls(time.monotonic() + ms / 1000)

    def remaining_s(self) -> float:
        return self.at - time.monotonic()

    def passed(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) >= self.at

    def timed_out(self, what: str, written: bool | None = None) -> RequestTimedOut:
        """The one error of a passed deadline, saying what did not finish in time and whether anything may
        have been written (None: unknown, the commit may still land)."""
        if written is False:
            return RequestTimedOut(f"{what} within the request deadline; nothing was written")
        return RequestTimedOut(f"{what} within the request deadline; the outcome is unknown: retry with the same "
                               "producer sequence or Idempotency-Key")

    @staticmethod
    def earliest(deadlines: list[Deadline]) -> Deadline:
        return min(deadlines, key=lambda d: d.at)
