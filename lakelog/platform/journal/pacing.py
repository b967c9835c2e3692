"""How many table commits the committer starts, and how many journal puts the writer makes: node budgets,
so that object requests do not grow with the topic count or the call rate.

Each table commit costs about two PUTs (a data file and a commit file), whatever it holds. With every
topic committed each `table.commit.interval.ms`, 300 active topics at a 5 s interval would be 60 commits
a second. Topics due by time share `journal_table_commit_rate` commits a second instead, the longest
waiting first, so a Delta reader sees a record within the larger of the interval and (topics due / rate)
seconds. Topics due by bytes (`table.commit.bytes` waiting: well-sized files) are never held back: their
commits grow with the bytes produced, not with the topics.

Journal puts on object storage share `journal_put_rate` a second the same way (writer.py): an idle node
puts at once (the bucket is full), a busy one gathers calls while the bucket refills, and a flush that
reached `batch.bytes` goes at once. A local folder's puts cost nothing and are not paced.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CommitPacer:
    """A token bucket: `rate` commits (or puts) a second, at most one second's worth saved up; rate 0: no
    limit."""

    rate: float
    _tokens: float = field(default=0.0, init=False)
    _at: float | None = field(default=None, init=False)

    def allowance(self, now: float) -> int:
        """How many time-due commits may start now (then `spent` says how many did)."""
        if self.rate <= 0:
            return 1 << 30
        if self._at is None:
            self._tokens = max(1.0, self.rate)  # a node starting up may commit at once
        else:
            self._tokens = min(max(1.0, self.rate), self._tokens + (now - self._at) * self.rate)
        self._at = now
        return int(self._tokens)

    def spent(self, commits: int) -> None:
        if self.rate > 0:
            self._tokens -= commits

    def delay(self, now: float) -> float:
        """Seconds until one more may start (0: now)."""
        if self.rate <= 0 or self.allowance(now) >= 1:
            return 0.0
        return (1 - self._tokens) / self.rate


@dataclass(frozen=True)
class Due:
    """A topic with acknowledged records waiting for its table commit."""

    name: str
    waited_s: float
    by_bytes: bool


def commits_to_start(due: list[Due], allowance: int) -> list[str]:
    """Every topic due by bytes, then the longest-waiting topics due by time, up to `allowance` of them."""
    by_bytes = [d.name for d in due if d.by_bytes]
    by_time = sorted((d for d in due if not d.by_bytes), key=lambda d: -d.waited_s)
    return by_bytes + [d.name for d in by_time[:max(0, allowance)]]
