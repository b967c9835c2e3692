"""Group commit with a pacer (platform/produce/group_commit.py): batches beyond the budget gather calls, a
batch of `batch_bytes` goes at once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from lakelog.platform.produce.group_commit import GroupCommit
from tests.patience import STUCK_S


@dataclass
class Call:
    size: int = 1
    future: Future = field(default_factory=Future)


class CountingPacer:
    """Lets `budget` batches go, then holds the rest back until `released` (a pacer whose tokens ran out)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.spent_calls = 0
        self.released = threading.Event()

    def delay(self, now: float) -> float:
        return 0.0 if self.budget > 0 or self.released.is_set() else 0.05

    def spent(self, commits: int) -> None:
        self.budget -= commits
        self.spent_calls += commits


def _numbering(batches: list[list[Call]]) -> Callable[[list[Call]], None]:
    """A batch handler that answers each call with its batch's number."""
    def handle(batch: list[Call]) -> None:
        batches.append(batch)
        for call in batch:
            call.future.set_result(len(batches))
    return handle


def test_batches_past_the_budget_wait_and_gather_the_calls_meanwhile() -> None:
    batches: list[list[Call]] = []
    handle = _numbering(batches)
    pacer = CountingPacer(budget=1)
    group = GroupCommit("paced", handle, 0, pacer=pacer)
    try:
        first = Call()
        group.submit(first)
        assert first.future.result(STUCK_S) == 1  # within the budget: at once
        waiting = [Call() for _ in range(5)]
        for call in waiting:
            group.submit(call)
        assert not any(call.future.done() for call in waiting)  # held: no budget
        pacer.released.set()
        assert {call.future.result(STUCK_S) for call in waiting} == {2}  # one batch for all five
        assert pacer.spent_calls == 2
    finally:
        group.close(STUCK_S)


def test_a_batch_of_batch_bytes_goes_without_the_budget() -> None:
    batches: list[list[Call]] = []
    handle = _numbering(batches)
    pacer = CountingPacer(budget=0)  # never released
    group = GroupCommit("paced", handle, 0, batch_bytes=3, size=lambda call: call.size, pacer=pacer)
    try:
        calls = [Call(size=1) for _ in range(3)]
        for call in calls:
            group.submit(call)
        assert all(call.future.result(STUCK_S) == 1 for call in calls)
        assert pacer.spent_calls == 0  # bytes-full batches spend no token
    finally:
        group.close(STUCK_S)
