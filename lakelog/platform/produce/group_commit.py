"""Group commit: calls queued by many threads, handled in batches by one thread.

A batch waits `linger` after its first call (or until `batch_bytes` are queued), and for a `pacer`'s
budget if it has one, then takes everything queued (after one hand-over of the interpreter lock, so calls
other threads hold in hand join it). While one batch is being handled the next one
fills, so batches grow with load and at most one commit is in flight. A batch that raises fails its
calls, never the thread. The node journal (produce), the offsets store (consumer-group commits) and
others commit this way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError
from typing import Callable, Generic, Protocol, TypeVar

from lakelog.platform.errors import BrokerClosed

log = logging.getLogger(__name__)


class Call(Protocol):
    @property
    def future(self) -> Future: ...


C = TypeVar("C", bound=Call)


class Pacer(Protocol):
    """A budget of batches a second (journal/pacing.py's token bucket)."""

    def delay(self, now: float) -> float: ...

    def spent(self, commits: int) -> None: ...


def fail(future: Future, error: BaseException) -> bool:
    """Answer with an error unless answered already; True when this answered it."""
    try:
        future.set_exception(error)
        return True
    except InvalidStateError:
        return False


def succeed(future: Future, result: object) -> None:
    try:
        future.set_result(result)
    except InvalidStateError:  # answered meanwhile (a deadline passed)
        pass


def copy_outcome(done: Future, into: Future) -> None:
    """Answer `into` as `done` was answered (unless answered already)."""
    error = done.exception()
    if error is not None:
        fail(into, error)
    else:
        succeed(into, done.result())


class GroupCommit(Generic[C]):
    def __init__(self, name: str, handle: Callable[[list[C]], None], linger_ms: float,
                 batch_bytes: int | None = None, size: Callable[[C], int] = lambda call: 0,
                 pacer: Pacer | None = None) -> None:
        """`pacer`: batches that did not reach `batch_bytes` also wait for its budget (calls gather meanwhile)."""
        self._handle = handle
        self._pacer = pacer
        self._linger_s = linger_ms / 1000
        self._batch_bytes = batch_bytes
        self._size = size
        self._queued: deque[C] = deque()
        self._queued_bytes = 0
        self._in_flight: list[C] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, call: C) -> None:
        with self._cond:
            if self._closed:
                raise BrokerClosed("shutting down: no new calls are taken")
            self._queued.append(call)
            self._queued_bytes += self._size(call)
            # Wake the flush thread only to start a linger or to end it early: a wake-up per call would
            # hand it the GIL once per request while it lingers.
            if len(self._queued) == 1 or (self._batch_bytes is not None and self._queued_bytes >= self._batch_bytes):
                self._cond.notify_all()

    def waiting(self) -> list[C]:
        """Every call not answered by a finished batch yet: queued, or in the batch in flight."""
        with self._cond:
            return list(self._queued) + list(self._in_flight)

    def drain(self) -> None:
        """Wait until every call submitted so far was handled."""
        with self._cond:
            while self._queued or self._in_flight:
                self._cond.wait(0.05)

    def close(self, timeout: float | None = None) -> None:
        """Handle what is queued, then stop."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                self._handle(batch)
            except Exception as exc:  # never let the thread die: fail the calls instead
                log.exception("%s: a batch failed", self._thread.name)
                for call in batch:
                    fail(call.future, exc)
            finally:
                with self._cond:
                    self._in_flight = []
                    self._cond.notify_all()

    def _full(self) -> bool:
        """Go now: closing, or `batch_bytes` queued."""
        return self._closed or (self._batch_bytes is not None and self._queued_bytes >= self._batch_bytes)

    def _take(self) -> list[C] | None:
        with self._cond:
            while not self._queued:
                if self._closed:
                    return None
                self._cond.wait()
        # Hand the interpreter lock over once before taking the batch: the submitting threads (the event
        # loop above all) finish the calls they hold in hand, which join this batch. On an idle node nobody
        # wants the lock and this returns at once (no linger); under load the batches grow to what the loop
        # read, and the batch's fixed cost (tables, encoding, the put) is paid per batch, not per few calls.
        time.sleep(0)
        with self._cond:
            flush_at = time.monotonic() + self._linger_s
            while not self._full():
                now = time.monotonic()
                remaining = max(flush_at - now, self._pacer.delay(now) if self._pacer is not None else 0.0)
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            if self._pacer is not None and not self._full():
                self._pacer.spent(1)
            batch = list(self._queued)
            self._in_flight = batch
            self._queued.clear()
            self._queued_bytes = 0
            return batch
