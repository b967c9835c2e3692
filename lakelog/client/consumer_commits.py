"""The consumer's commits: synchronous or asynchronous (`on_commit` hears the outcome), with the member
id and generation under `subscribe`, assign mode's auto-commit, the commit of partitions given up in a
rebalance and the one on close.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from lakelog.client.consumer_config import MEMBER_GONE, TP, CommitCallback, group_path, tp_list
from lakelog.client.consumer_state import Handed, MemberState
from lakelog.client.errors import KafkaError, KafkaException
from lakelog.client.http import Session, with_retries
from lakelog.client.message import Message, TopicPartition

log = logging.getLogger("lakelog.client.consumer")  # the consumer's one logger, whichever part logs


class Commits:
    """The consumer's commits.

    Thread contract: the application's thread calls it (commit, poll's auto-commit, a rebalance's commit,
    close); asynchronous commits run on `_committer`, its one thread of its own, created at the first
    one, with an HTTP session each. It reads what was handed out (`handed`: the application's thread
    only) and the member (`member`, whose changes are under its own lock); its own state (`_committer`,
    `_last_auto_commit`) is the application's thread's.
    """

    def __init__(self, session: Session, new_session: Callable[[], Session], call: Callable[..., Any],
                 group: str | None, member: MemberState, handed: Handed, mode: Callable[[], str | None],
                 check_open: Callable[[], None], *, api_timeout_s: float, backoff_s: float,
                 on_commit: CommitCallback | None, auto_commit: bool, auto_commit_interval_ms: Any) -> None:
        """`session`: the application thread's HTTP session; `new_session()`: one for an async commit;
        `call(method, path, ...)`: a request retried up to default.api.timeout.ms; `mode()`: "subscribe",
        "assign" or None; `check_open()`: raises once the consumer is closed; `auto_commit_interval_ms`: as
        configured (read as a number at each auto-commit check)."""
        self._session = session
        self._new_session = new_session
        self._call = call
        self._group = group
        self._member = member
        self._handed = handed
        self._mode = mode
        self._check_open = check_open
        self._api_timeout_s = api_timeout_s
        self._backoff_s = backoff_s
        self._on_commit = on_commit
        self._auto_commit = auto_commit
        self._auto_commit_interval_ms = auto_commit_interval_ms
        self._last_auto_commit = time.monotonic()
        self._committer: ThreadPoolExecutor | None = None

    def commit(self, message: Message | None = None, offsets: list[TopicPartition] | None = None,
               asynchronous: bool = True) -> list[TopicPartition] | None:
        """Commit the message's next offset, the given offsets, or every position poll() handed out.
        Synchronous: answers the committed offsets once durable (raises on failure). Asynchronous
        (confluent-kafka's default): returns at once; `on_commit(err, partitions)` hears the outcome."""
        self._check_open()
        if message is not None:
            wanted = {(message.topic(), message.partition()): message.offset() + 1}
        elif offsets is not None:
            wanted = {tp.key(): tp.offset for tp in offsets}
        else:
            wanted = self._handed.consumed()
        if not wanted:
            if asynchronous:
                return None
            raise KafkaException(KafkaError("_NO_OFFSET", "nothing to commit"))
        member, generation = self._identity()
        if not asynchronous:
            try:
                return self._commit_now(self._session, wanted, member, generation)
            except KafkaException as exc:
                self._note_gone(exc.args[0], member)
                raise
        if self._committer is None:
            self._committer = ThreadPoolExecutor(1, thread_name_prefix="lakelog-commit")
        self._committer.submit(self._commit_async, wanted, member, generation)
        return None

    def _identity(self) -> tuple[str | None, int]:
        """Who commits: the member and its generation under `subscribe`, nobody (-1) in assign mode."""
        return (self._member.member_id, self._member.generation) if self._mode() == "subscribe" else (None, -1)

    def _note_gone(self, error: KafkaError, member: str | None) -> None:
        """A commit answered that the server forgot this member: rejoin at the next poll (and drop what
        was fetched but not handed out: it comes again from the committed offsets)."""
        if error.code() in MEMBER_GONE and member is not None:
            self._member.forgotten(member)

    def _commit_async(self, wanted: dict[TP, int], member: str | None, generation: int) -> None:
        callback = self._on_commit
        session = self._new_session()
        try:
            self._commit_now(session, wanted, member, generation)
            error = None
        except KafkaException as exc:
            error = exc.args[0]
            self._note_gone(error, member)
            log.warning("async commit failed: %s", error)
        finally:
            session.close()
        if callback is not None:
            callback(error, tp_list(wanted, wanted))

    def _commit_now(self, session: Session, wanted: dict[TP, int], member: str | None,
                    generation: int) -> list[TopicPartition]:
        if member is None and self._mode() == "subscribe":
            raise KafkaException(KafkaError("UNKNOWN_MEMBER_ID", "not in the group (rejoining): cannot commit"))
        body: dict[str, Any] = {"generation": generation,
                                "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in
                                            sorted(wanted.items())]}
        if member is not None:
            body["member_id"] = member
        with_retries(lambda: session.request("POST", f"{group_path(self._group)}/offsets", json=body),
                     time.monotonic() + self._api_timeout_s, self._backoff_s)
        return tp_list(wanted, wanted)

    def maybe_auto_commit(self) -> None:
        """Assign mode only (the server auto-commits group members at their polls)."""
        if self._mode() != "assign" or not self._auto_commit or not self._group:
            return
        now = time.monotonic()
        if now - self._last_auto_commit >= int(self._auto_commit_interval_ms) / 1000:
            self._last_auto_commit = now
            self.commit(asynchronous=True)

    def commit_revoked(self, wanted: dict[TP, int]) -> None:
        """Commit what was read of partitions being given up, before the server hands them on. A newer
        generation may have started meanwhile: read it from the group's description (a heartbeat now
        would hand the partitions on before the commit) and commit once more."""
        generation = self._member.generation
        for attempt in range(2):
            try:
                self._commit_now(self._session, wanted, self._member.member_id, generation)
                return
            except KafkaException as exc:
                if exc.args[0].code() != "ILLEGAL_GENERATION" or attempt:
                    log.warning("commit of revoked partitions failed: %s", exc)
                    return
                generation = int(self._call("GET", group_path(self._group))["generation"])

    def final_commit(self, relearn: Callable[[], None]) -> None:
        """The commit on close of what poll() handed out; `relearn()` learns the current generation (a
        heartbeat) when the first attempt met an older one."""
        wanted = self._handed.consumed()
        if not wanted:
            return
        for attempt in range(2):
            member, generation = self._identity()
            try:
                self._commit_now(self._session, wanted, member, generation)
                return
            except KafkaException as exc:
                if exc.args[0].code() != "ILLEGAL_GENERATION" or attempt:
                    log.warning("commit on close failed: %s", exc)
                    return
                relearn()  # learn the current generation, then commit once more

    def close(self) -> None:
        """Wait for the asynchronous commits sent so far."""
        if self._committer is not None:
            self._committer.shutdown(wait=True)
