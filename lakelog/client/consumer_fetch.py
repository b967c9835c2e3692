"""The consumer's reading: poll answers handed out in order, a group member's fetch (the server keeps
its positions), assign mode's fetch from the client's own positions, offsets listed and committed,
`seek` and `position`. The buffer of fetched records not handed out yet is the application's
(`consumer_state.Handed`).
"""

from __future__ import annotations

import time
from typing import Any, Callable
from urllib.parse import quote

from lakelog.client.consumer_config import MEMBER_GONE, TP, group_path
from lakelog.client.consumer_membership import Membership
from lakelog.client.consumer_state import Handed, MemberState
from lakelog.client.errors import INVALID_ARG, NOT_IMPLEMENTED, STATE, KafkaError, KafkaException
from lakelog.client.http import Session
from lakelog.client.message import OFFSET_BEGINNING, OFFSET_END, Message, TopicPartition, from_fetched


class Fetching:
    """The consumer's reading.

    Thread contract: the application's thread only (poll, consume, seek, position, committed, assign),
    so no lock: its own state is assign mode's (`_fetch_at`, `_cursor`) and the poll requests' count.
    It reads and fills what the application holds (`handed`), reads the member (`member`, whose changes
    are under its own lock), and has `membership` heartbeat and serve the group's changes when a poll
    answer shows a rebalance.
    """

    def __init__(self, session: Session, call: Callable[..., Any], group: str | None, member: MemberState,
                 handed: Handed, membership: Membership, mode: Callable[[], str | None], *, reset: str,
                 max_poll_records: Any, fetch_max_bytes: Any, backoff_s: float, request_s: float) -> None:
        """`session`: the application thread's HTTP session; `call(method, path, ...)`: a request retried up
        to default.api.timeout.ms; `mode()`: "subscribe", "assign" or None; `reset`: auto.offset.reset;
        `max_poll_records`, `fetch_max_bytes`: the settings as configured (read as numbers at each fetch)."""
        self._session = session
        self._call = call
        self._group = group
        self._member = member
        self._handed = handed
        self._membership = membership
        self._mode = mode
        self._reset = reset
        self._max_poll_records = max_poll_records
        self._fetch_max_bytes = fetch_max_bytes
        self._backoff_s = backoff_s
        self._request_s = request_s
        self._poll_requests = 0  # subscribe mode: poll requests sent, numbered (`request`), never reset
        self._fetch_at: dict[TP, int] = {}  # assign mode: the next offset to fetch
        self._cursor = 0

    def forget_fetch_offsets(self) -> None:
        """Assign mode: fetch every partition from its start again (a new assignment)."""
        self._fetch_at.clear()

    def fetch_group(self, wait_s: float) -> list[Message]:
        member = self._member.member_id
        if member is None:
            self._member.ask_rejoin()
            time.sleep(min(self._backoff_s, wait_s))
            return []
        self._poll_requests += 1  # a request given up on may reach the coordinator after this one: it is stale
        params = {"max_records": int(self._max_poll_records), "timeout_ms": int(wait_s * 1000),
                  "key_format": "base64", "value_format": "base64", "after": self._member.polls,
                  "request": self._poll_requests}
        if self._fetch_max_bytes:
            params["max_bytes"] = int(self._fetch_max_bytes)
        handed = self._handed
        handed.given_up.clear()
        try:
            path = f"{group_path(self._group)}/members/{quote(member, safe='')}/records"
            answer = self._session.request("GET", path, params=params, timeout_s=wait_s + self._request_s)
        except KafkaException as exc:
            return self._fetch_failed(exc.args[0], wait_s)
        self._member.polls = answer.get("poll", 0)
        if answer.get("generation") is not None and answer["generation"] != self._member.generation:
            self._membership.beat(self._session)  # a rebalance happened: learn the assignment before handing out
        messages = [from_fetched(r) for r in answer["records"]]
        if any((m.topic(), m.partition()) not in handed.assignment for m in messages):
            self._membership.beat(self._session)
        self._membership.serve_group_changes()
        # Records of partitions given up meanwhile were committed up to what was handed out: their new
        # owner reads them from there.
        return [m for m in messages if (m.topic(), m.partition()) not in handed.given_up]

    def _fetch_failed(self, error: KafkaError, wait_s: float) -> list[Message]:
        if error.code() in MEMBER_GONE:
            self._member.ask_rejoin()
            return []
        if error.retriable():
            time.sleep(min(self._backoff_s, wait_s))
            return []
        raise KafkaException(error)

    def fetch_assigned(self, wait_s: float) -> list[Message]:
        """Assign mode: each partition in turn from the client's own positions; the last one long-polls."""
        plan = sorted(self._handed.assignment)
        if not plan:
            time.sleep(wait_s)
            return []
        self._cursor = (self._cursor + 1) % len(plan)
        plan = plan[self._cursor:] + plan[:self._cursor]
        share = max(int(self._max_poll_records) // len(plan), 1)
        for i, tp in enumerate(plan):
            last = i == len(plan) - 1
            try:
                offset = self._fetch_at.get(tp)
                if offset is None:
                    offset = self._fetch_at[tp] = self._start_offset(tp)
                answer = self._session.request(
                    "GET", f"/v1/topics/{quote(tp[0], safe='')}/partitions/{tp[1]}/records",
                    params={"offset": offset, "max_records": share, "timeout_ms": int(wait_s * 1000) if last else 0,
                            "key_format": "base64", "value_format": "base64"},
                    timeout_s=wait_s + self._request_s)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == "OFFSET_OUT_OF_RANGE" and self._reset != "none":
                    self._fetch_at[tp] = self._list_offset(tp, self._reset)
                    continue
                return self._fetch_failed(error, wait_s)
            if answer["records"]:
                self._fetch_at[tp] = answer["next_offset"]
                return [from_fetched(r) for r in answer["records"]]
        return []

    def _start_offset(self, tp: TP) -> int:
        committed = self._committed_offsets().get(tp) if self._group else None
        if committed is not None:
            return committed
        if self._reset == "none":
            raise KafkaException(KafkaError("OFFSET_OUT_OF_RANGE", f"no committed offset for {tp[0]}-{tp[1]} and "
                                                                   "auto.offset.reset is none"))
        return self._list_offset(tp, self._reset)

    def _list_offset(self, tp: TP, spec: str | int) -> int:
        answer = self._call("GET", f"/v1/topics/{quote(tp[0], safe='')}/partitions/{tp[1]}/offsets",
                            params={"spec": str(spec)})
        return int(answer["offset"])

    def seek(self, partition: TopicPartition) -> None:
        """Read `partition` from its offset next. Assign mode: any offset. Subscribe mode: the server keeps
        the group's positions and has no seek, so only forward (records below the offset are skipped)."""
        tp = partition.key()
        handed = self._handed
        if tp not in handed.assignment:
            raise KafkaException(KafkaError(STATE, f"{tp[0]}-{tp[1]} is not assigned to this consumer"))
        offset = partition.offset
        if offset == OFFSET_BEGINNING:
            offset = self._list_offset(tp, "earliest")
        elif offset == OFFSET_END:
            offset = self._list_offset(tp, "latest")
        if offset < 0:
            raise KafkaException(KafkaError(INVALID_ARG, f"cannot seek to offset {partition.offset}"))
        handed.drop_buffered({tp})
        if self._mode() == "assign":
            self._fetch_at[tp] = offset
            handed.positions[tp] = offset
            return
        position = handed.positions.get(tp)
        if position is not None and offset < position:
            raise KafkaException(KafkaError(NOT_IMPLEMENTED, "the server keeps a group member's positions and has "
                                                             "no seek: subscribe mode seeks forward only"))
        handed.skip[tp] = offset
        handed.positions[tp] = offset

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        positions = self._handed.positions
        return [TopicPartition(tp.topic, tp.partition, positions.get(tp.key(), -1001)) for tp in partitions]

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        found = self._committed_offsets()
        return [TopicPartition(tp.topic, tp.partition, found.get(tp.key(), -1001)) for tp in partitions]

    def _committed_offsets(self) -> dict[TP, int]:
        try:
            answer = self._call("GET", f"{group_path(self._group)}/offsets")
        except KafkaException as exc:
            if exc.args[0].status() == 404:
                return {}
            raise
        return {(o["topic"], o["partition"]): o["offset"] for o in answer["offsets"]}
