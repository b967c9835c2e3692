"""Table freshness for bench_journal: how long after its acknowledgement a record is in its topic's table, as
a Delta reader in another process sees it.

The benchmark notes a marker for a sample of its produce calls (the topic's table URI, the partition, the
record's offset and the acknowledgement time) and hands it to a child process (`python -m
benchmarks.journal_freshness`, one JSON line per marker on its stdin). The child opens each marked topic's
table with `deltalake.DeltaTable(uri, storage_options=...)` and reloads it (`update_incremental()`) until the
partition's log end offset, lakelog's `SetTransaction("lakelog.partition.<p>", log end)` committed with the
records, is past the marker's offset: the record is then visible to any Delta reader. Freshness is the time
from the acknowledgement to the end of the reload that first showed it (both on CLOCK_MONOTONIC, which Linux
shares between processes), so it errs late by at most one poll interval.

Cheap by design: only tables with a marker not yet visible are polled, each every tenth of its oldest
marker's age (at least 0.1 s, at most 2 s apart: within 10% or 2 s of the truth), by version and log end
(no data file is read). The reader talks to moto directly, not through the counting proxy, so the PUT and
request counts stay the broker's own.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import percentile

PARTITION_APP_PREFIX = "lakelog.partition."  # the log end offset per partition, committed with the records
MIN_POLL_S, MAX_POLL_S, POLL_SHARE = 0.1, 2.0, 0.1
REPO = Path(__file__).resolve().parents[1]


@dataclass
class Freshness:
    """What the reader saw: per marker visible in time, seconds from acknowledgement to visible; per marker
    still not visible when the reader stopped, its age then (a lower bound)."""

    seen: list[float] = field(default_factory=list)
    unseen: list[float] = field(default_factory=list)
    polls: int = 0  # table loads and reloads the reader made
    error: str = ""

    @property
    def markers(self) -> int:
        return len(self.seen) + len(self.unseen)

    @property
    def p50(self) -> float:
        return percentile(self.seen + self.unseen, 50)

    @property
    def max(self) -> float:
        """The longest seen; at least the age of any marker never seen (then a lower bound)."""
        every = self.seen + self.unseen
        return max(every) if every else float("nan")

    def note(self, seconds: float) -> str:
        text = f"{len(self.seen)} of {self.markers} marker records seen in the table by a Delta reader in another " \
               f"process, {self.polls / max(seconds, 1e-9):.1f} table loads/s"
        if self.unseen:
            text += f"; {len(self.unseen)} not visible after {min(self.unseen):.0f} s or more (counted at that age)"
        if self.error:
            text += f"; reader failed: {self.error}"
        return text


class FreshnessReader:
    """The parent's handle: `with FreshnessReader(options) as reader:` ... `reader.mark(...)` from any thread,
    then `reader.finish(wait_s)`."""

    def __init__(self, storage_options: dict[str, str] | None) -> None:
        self._options = storage_options or {}
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._started = 0.0

    def start(self) -> "FreshnessReader":
        self._proc = subprocess.Popen([sys.executable, "-m", "benchmarks.journal_freshness", json.dumps(self._options)],
                                      cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._started = time.monotonic()
        return self

    def mark(self, uri: str, partition: int, offset: int, acked: float) -> None:
        """A record at `offset` of `partition`, acknowledged at `acked` (time.monotonic())."""
        self._send({"uri": uri, "partition": partition, "offset": offset, "acked": acked})

    def finish(self, wait_s: float) -> Freshness:
        """Wait until every marker is visible or `wait_s` passed, then stop the reader and return what it saw."""
        try:
            self._send({"done": wait_s})
            line = self._proc.stdout.readline()  # type: ignore[union-attr]
        except (OSError, ValueError) as exc:
            return Freshness(error=str(exc))
        finally:
            self.stop()
        if not line:
            return Freshness(error="the reader process exited without an answer (its stderr says why)")
        return Freshness(**json.loads(line))

    def _send(self, message: dict) -> None:
        with self._lock:
            self._proc.stdin.write(json.dumps(message) + "\n")  # type: ignore[union-attr]
            self._proc.stdin.flush()  # type: ignore[union-attr]

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]

    def __enter__(self) -> "FreshnessReader":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---- the reader (in its own process) ------------------------------------------------------------------

@dataclass
class _Watched:
    """One table with markers not yet visible."""

    markers: list[tuple[int, int, float]] = field(default_factory=list)  # partition, offset, acked
    table: object = None  # the DeltaTable, once opened
    next_poll: float = 0.0


def _poll(uri: str, watched: _Watched, options: dict[str, str], seen: list[float]) -> None:
    from deltalake import DeltaTable

    if watched.table is None:
        watched.table = DeltaTable(uri, storage_options=options or None)
    else:
        watched.table.update_incremental()  # type: ignore[attr-defined]
    at = time.monotonic()
    table = watched.table
    ends: dict[int, int] = {}
    left = []
    for partition, offset, acked in watched.markers:
        if partition not in ends:
            ends[partition] = table.transaction_version(f"{PARTITION_APP_PREFIX}{partition}") or 0  # type: ignore
        if offset < ends[partition]:
            seen.append(at - acked)
        else:
            left.append((partition, offset, acked))
    watched.markers = left


def _child_main(options: dict[str, str]) -> None:
    inbox: queue.Queue[dict | None] = queue.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            inbox.put(json.loads(line))
        inbox.put(None)  # the parent is gone

    threading.Thread(target=read_stdin, daemon=True).start()
    watched: dict[str, _Watched] = {}
    seen: list[float] = []
    polls = 0
    deadline: float | None = None
    while True:
        try:
            while True:
                message = inbox.get_nowait()
                if message is None:
                    return
                if "done" in message:
                    deadline = time.monotonic() + float(message["done"])
                else:
                    entry = watched.setdefault(message["uri"], _Watched())
                    entry.markers.append((int(message["partition"]), int(message["offset"]), float(message["acked"])))
        except queue.Empty:
            pass
        now = time.monotonic()
        waiting = {uri: w for uri, w in watched.items() if w.markers}
        if deadline is not None and (not waiting or now >= deadline):
            break
        for uri, entry in waiting.items():
            if entry.next_poll > now:
                continue
            try:
                _poll(uri, entry, options, seen)
            except Exception as exc:  # a reload failing now and then (moto busy): tried again at the next poll
                print(f"freshness reader: {uri}: {exc}", file=sys.stderr)
            polls += 1
            now = time.monotonic()
            if entry.markers:
                oldest = now - min(acked for _, _, acked in entry.markers)
                entry.next_poll = now + min(MAX_POLL_S, max(MIN_POLL_S, oldest * POLL_SHARE))
        polls_due = [w.next_poll for w in watched.values() if w.markers]
        time.sleep(max(0.01, min(0.05, min(polls_due, default=now + 0.05) - time.monotonic())))
    now = time.monotonic()
    unseen = [now - acked for w in watched.values() for _, _, acked in w.markers]
    print(json.dumps({"seen": seen, "unseen": unseen, "polls": polls}), flush=True)


if __name__ == "__main__":
    _child_main(json.loads(sys.argv[1]))
