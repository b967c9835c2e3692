"""Table commits behind the journal: per topic, every `table.commit.interval.ms` or once
`table.commit.bytes` wait, one Delta commit of its acknowledged entries at their own offsets.

One thread looks for due topics every `TICK_S` and hands them to a small pool, those due by time paced
to the node's `journal_table_commit_rate` (pacing.py; a topic's commits never overlap:
`JournalTopic.commit_lock`). A commit is planned against the table's log end offsets
(planner.py): entries the table already holds are dropped, those from the log end on are appended with
`expect_bases`, so the log refuses rather than move them. After it, the entries leave memory (fetches read
the table, whose tail cache the append filled) and the journal deletes objects whose entries are all in.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from lakelog.platform.deadline import Deadline
from lakelog.platform.errors import LakelogError, OffsetsMoved
from lakelog.platform.journal.pacing import CommitPacer, Due, commits_to_start
from lakelog.platform.journal.table_commit import commit_entries
from lakelog.platform.journal.writer import JournalWriter
from lakelog.platform.storage import STORAGE_ERRORS

if TYPE_CHECKING:
    from lakelog.platform.broker.open_topic import OpenTopic

log = logging.getLogger(__name__)

TICK_S = 0.05


class TableCommitter:
    def __init__(self, journal: JournalWriter, workers: int = 4, rate: float = 0) -> None:
        """`rate`: table commits a second for topics due by time (pacing.py; 0: no limit)."""
        self.journal = journal
        self.commits = 0
        self._pacer = CommitPacer(rate)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lakelog-table-commit")
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lakelog-table-committer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._closed.wait(TICK_S):
            now = time.monotonic()
            topics = {opened.meta.name: opened for opened in self.journal.topics_with_entries()}
            with self._lock:
                idle = [opened for name, opened in topics.items() if name not in self._busy]
            due = [d for d in (_due(opened, now) for opened in idle) if d is not None]
            if not due:
                continue
            started = commits_to_start(due, self._pacer.allowance(now))
            for name in started:
                self._start(topics[name])
            self._pacer.spent(len(started) - sum(d.by_bytes for d in due))

    def _start(self, opened: OpenTopic) -> None:
        with self._lock:
            self._busy.add(opened.meta.name)
        try:
            self._pool.submit(self._commit_in_background, opened)
        except RuntimeError:  # shutting down
            with self._lock:
                self._busy.discard(opened.meta.name)

    def _commit_in_background(self, opened: OpenTopic) -> None:
        try:
            self.commit_topic(opened)
        except (LakelogError, *STORAGE_ERRORS) as exc:
            log.warning("table commit of %s from the journal failed (tried again): %s", opened.meta.name, exc)
        except Exception:
            log.exception("table commit of %s from the journal failed (tried again)", opened.meta.name)
        finally:
            with self._lock:
                self._busy.discard(opened.meta.name)

    def commit_topic(self, opened: OpenTopic, deadline: Deadline | None = None) -> None:
        """Commit every acknowledged entry of the topic now (also the exactly-once path's first step); by
        `deadline` if given (a caller waiting on it), else within a commit's own bound."""
        state = opened.journal
        if deadline is None:
            state.commit_lock.acquire()
        elif not state.commit_lock.acquire(timeout=max(deadline.remaining_s(), 0.0)):
            raise deadline.timed_out(f"the table commit of {opened.meta.name!r} in progress did not end")
        try:
            items = state.pending()
            if not items:
                return
            try:
                done = commit_entries(opened, items, deadline)
            except OffsetsMoved:  # another writer (a taker's replay) committed some: plan again on the log now
                opened.log.refresh()
                done = commit_entries(opened, items, deadline)
            self.commits += 1
            if opened.replica_state is not None:
                state.committed_unreplicated(done, opened.log.version)
            state.drop(done)
            self.journal.committed_entries(done)
        finally:
            state.commit_lock.release()

    def commit_all(self) -> None:
        """Commit every topic's acknowledged entries now, on this thread (a flush, a clean shutdown)."""
        for opened in self.journal.topics_with_entries():
            try:
                self.commit_topic(opened)
            except (LakelogError, *STORAGE_ERRORS) as exc:
                log.warning("table commit of %s from the journal failed: %s", opened.meta.name, exc)

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        self._pool.shutdown(wait=True)


def _due(opened: OpenTopic, now: float) -> Due | None:
    config = opened.meta.config
    state = opened.journal
    return state.due(now, config.table_commit_interval_ms, config.table_commit_bytes)
