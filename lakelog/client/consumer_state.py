"""The consumer's state shared by its parts (membership, fetching, commits): the member as the server
knows it (`MemberState`), and what the application has been told and handed (`Handed`).
"""

from __future__ import annotations

import threading
import time
from collections import deque

from lakelog.client.consumer_config import TP
from lakelog.client.message import Message


class MemberState:
    """What the server said of this member: its id and generation, the assignment of the last heartbeat,
    the partitions it asked back (cooperative) and when, whether to rejoin; the number of the last poll
    answer received (subscribe mode, sent back as `after`).

    Thread contract: written by whichever thread heartbeats (the heartbeat thread, the application's when
    it joins or learns a new generation), by the async committer's thread (a commit that found the member
    gone) and by the application's thread; every change is under `_lock`. `member_id`, `generation` and
    `polls` are read without it, a snapshot good for one request (`polls`: the application's thread only).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.member_id: str | None = None
        self.generation = -1
        self.server_assignment: set[TP] | None = None
        self.revoke_told: set[TP] = set()
        self.told_at = 0.0
        self.rejoin = False
        self.polls = 0  # subscribe mode: the number of the last poll answer received (sent back as `after`)

    def joined(self, member_id: str, generation: int) -> None:
        with self._lock:
            self.member_id, self.generation = member_id, generation
            self.polls = 0  # a new member: no poll received yet
            self.server_assignment, self.revoke_told, self.rejoin = None, set(), False

    def beat_target(self, session_s: float) -> tuple[str | None, bool]:
        """The member to heartbeat, and whether to wait: partitions the server asked back are not given
        up yet, for at most half the session timeout (`session_s`)."""
        with self._lock:
            waiting = bool(self.revoke_told) and time.monotonic() - self.told_at < session_s / 2
            return self.member_id, waiting

    def heard(self, member: str, generation: int, assignment: set[TP], revoke: set[TP], cooperative: bool) -> None:
        """A heartbeat's answer for `member` (ignored when this consumer is another member by now)."""
        with self._lock:
            if self.member_id != member:
                return
            self.generation = generation
            self.server_assignment = assignment
            if revoke and cooperative:
                self.revoke_told = revoke
                self.told_at = time.monotonic()
            else:
                self.revoke_told = set()

    def forgotten(self, member: str | None) -> None:
        """The server forgot `member`: rejoin, if this consumer still is that member."""
        with self._lock:
            if self.member_id == member:
                self.rejoin = True

    def ask_rejoin(self) -> None:
        with self._lock:
            self.rejoin = True

    def changes(self) -> tuple[bool, set[TP], set[TP] | None]:
        """Whether to rejoin, the partitions asked back, the server's assignment (copies)."""
        with self._lock:
            server = None if self.server_assignment is None else set(self.server_assignment)
            return self.rejoin, set(self.revoke_told), server

    def given_back(self, told: set[TP]) -> None:
        """Partitions asked back are given up (the next heartbeat tells the server)."""
        with self._lock:
            self.revoke_told -= told

    def clear_revoke(self) -> None:
        with self._lock:
            self.revoke_told = set()

    def lost(self) -> None:
        with self._lock:
            self.member_id = None

    def left(self) -> None:
        with self._lock:
            self.member_id, self.server_assignment, self.revoke_told = None, None, set()


class Handed:
    """What the application has been told and handed: its assignment, the records fetched and not handed
    out yet, the positions after what poll() handed out, forward seeks (subscribe mode), the partitions
    given up during the fetch in progress.

    Thread contract: the application's thread only (poll, consume, commit, seek, assign, close, and the
    rebalances served in it); no lock.
    """

    def __init__(self) -> None:
        self.assignment: set[TP] = set()
        self.buffer: deque[Message] = deque()
        self.positions: dict[TP, int] = {}  # the next offset after what poll() handed out
        self.skip: dict[TP, int] = {}  # subscribe mode: a forward seek, records below are dropped
        self.given_up: set[TP] = set()  # partitions given up during the fetch in progress

    def hand_out(self, limit: int) -> list[Message]:
        out: list[Message] = []
        while self.buffer and len(out) < limit:
            message = self.buffer.popleft()
            tp = (message.topic(), message.partition())
            if message.offset() < self.skip.get(tp, -1):
                continue
            self.positions[tp] = message.offset() + 1
            out.append(message)
        return out

    def consumed(self) -> dict[TP, int]:
        """The positions of the assigned partitions: what a commit of everything handed out commits."""
        return {tp: o for tp, o in self.positions.items() if tp in self.assignment}

    def give_up(self, partitions: set[TP]) -> None:
        self.assignment -= partitions
        self.given_up |= partitions
        self.drop_buffered(partitions)
        for tp in partitions:
            self.positions.pop(tp, None)
            self.skip.pop(tp, None)

    def drop_buffered(self, partitions: set[TP]) -> None:
        """Forget fetched, not handed out records of these partitions (in place: one buffer for good)."""
        kept = [m for m in self.buffer if (m.topic(), m.partition()) not in partitions]
        self.buffer.clear()
        self.buffer.extend(kept)
