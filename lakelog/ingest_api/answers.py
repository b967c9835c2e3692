"""Futures the core answers on its threads, awaited on the event loop with one wake-up per batch.

`asyncio.wrap_future` wakes the loop once per future (`call_soon_threadsafe`: a write to the loop's
self-pipe, then a read and a callback each), and a journal flush answers every call it took at once.
Here the answered futures queue up and the first of a batch schedules one drain of them all.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from concurrent.futures import Future
from typing import Any

_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Answers] = weakref.WeakKeyDictionary()


class Answers:
    """One event loop's queue of answered futures."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._ready: deque[tuple[Future, asyncio.Future]] = deque()
        self._scheduled = False

    def wait(self, future: Future) -> asyncio.Future:
        """An asyncio future answered as `future` is. Cancelling it (a client gone) leaves `future` alone:
        its owner answers it."""
        waiter = self.loop.create_future()
        future.add_done_callback(lambda done: self._answered(done, waiter))
        return waiter

    def _answered(self, done: Future, waiter: asyncio.Future) -> None:  # any thread
        self._ready.append((done, waiter))
        if not self._scheduled:
            self._scheduled = True
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop closed: nobody waits any more
                pass

    def _drain(self) -> None:
        # Cleared before the queue is read: a future answered from here on schedules the next drain.
        self._scheduled = False
        ready = self._ready
        while ready:
            done, waiter = ready.popleft()
            if waiter.cancelled():
                continue
            if done.cancelled():
                waiter.cancel()
                continue
            error = done.exception()
            if error is not None:
                waiter.set_exception(error)
            else:
                waiter.set_result(done.result())


async def answered(future: Future) -> Any:
    """`future`'s result, awaited on the running loop."""
    loop = asyncio.get_running_loop()
    answers = _BY_LOOP.get(loop)
    if answers is None:
        answers = _BY_LOOP[loop] = Answers(loop)
    return await answers.wait(future)
