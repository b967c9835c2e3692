"""The consumer's commits: synchronous or asynchronous (`on_commit` hears the outcome), with the member
id and generation under `subscribe`, assign mode's auto-commit, the commit of partitions given up in a
rebalance and the one on close.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lakelog.client.consumer_config import MEMBER_GONE, TP, CommitCallback, tp_list
from lakelog.client.errors import KafkaError, KafkaException
from lakelog.client.http import Session, with_retries
from lakelog.client.message import Message, TopicPartition

log = logging.getLogger("lakelog.client.consumer")  # the consumer's one logger, whichever part logs


class Commits:
    """Consumer's commits (a part of `Consumer`: its state is set up in `Consumer.__init__`)."""

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
            wanted = {tp: o for tp, o in self._positions.items() if tp in self._assignment}
        if not wanted:
            if asynchronous:
                return None
            raise KafkaException(KafkaError("_NO_OFFSET", "nothing to commit"))
        member, generation = (self._member_id, self._generation) if self._mode == "subscribe" else (None, -1)
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

    def _note_gone(self, error: KafkaError, member: str | None) -> None:
        """A commit answered that the server forgot this member: rejoin at the next poll (and drop what
        was fetched but not handed out: it comes again from the committed offsets)."""
        if error.code() in MEMBER_GONE and member is not None:
            with self._lock:
                if self._member_id == member:
                    self._rejoin = True

    def _commit_async(self, wanted: dict[TP, int], member: str | None, generation: int) -> None:
        callback: CommitCallback | None = self._config["on_commit"]
        session = Session(self._url, self._api_key, self._request_s)
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
        if member is None and self._mode == "subscribe":
            raise KafkaException(KafkaError("UNKNOWN_MEMBER_ID", "not in the group (rejoining): cannot commit"))
        body: dict[str, Any] = {"generation": generation,
                                "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in
                                            sorted(wanted.items())]}
        if member is not None:
            body["member_id"] = member
        with_retries(lambda: session.request("POST", f"{self._group_path()}/offsets", json=body),
                     time.monotonic() + self._api_timeout_s, self._backoff_s)
        return tp_list(wanted, wanted)

    def _maybe_auto_commit(self) -> None:
        """Assign mode only (the server auto-commits group members at their polls)."""
        if self._mode != "assign" or not self._auto_commit or not self._group:
            return
        now = time.monotonic()
        if now - self._last_auto_commit >= int(self._config["auto.commit.interval.ms"]) / 1000:
            self._last_auto_commit = now
            self.commit(asynchronous=True)

    def _commit_revoked(self, wanted: dict[TP, int]) -> None:
        """Commit what was read of partitions being given up, before the server hands them on. A newer
        generation may have started meanwhile: read it from the group's description (a heartbeat now
        would hand the partitions on before the commit) and commit once more."""
        generation = self._generation
        for attempt in range(2):
            try:
                self._commit_now(self._session, wanted, self._member_id, generation)
                return
            except KafkaException as exc:
                if exc.args[0].code() != "ILLEGAL_GENERATION" or attempt:
                    log.warning("commit of revoked partitions failed: %s", exc)
                    return
                generation = int(self._call("GET", self._group_path())["generation"])

    def _final_commit(self) -> None:
        wanted = {tp: o for tp, o in self._positions.items() if tp in self._assignment}
        if not wanted:
            return
        for attempt in range(2):
            member, generation = (self._member_id, self._generation) if self._mode == "subscribe" else (None, -1)
            try:
                self._commit_now(self._session, wanted, member, generation)
                return
            except KafkaException as exc:
                if exc.args[0].code() != "ILLEGAL_GENERATION" or attempt:
                    log.warning("commit on close failed: %s", exc)
                    return
                with self._lock:
                    self._revoke_told = set()
                self._beat(self._session)  # learn the current generation, then commit once more
