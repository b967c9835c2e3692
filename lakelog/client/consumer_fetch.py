"""The consumer's reading: poll answers handed out in order, a group member's fetch (the server keeps
its positions), assign mode's fetch from the client's own positions, offsets listed and committed,
`seek` and `position`, the buffer of fetched records not handed out yet.
"""

from __future__ import annotations

import time
from urllib.parse import quote

from lakelog.client.consumer_config import MEMBER_GONE, TP
from lakelog.client.errors import INVALID_ARG, NOT_IMPLEMENTED, STATE, KafkaError, KafkaException
from lakelog.client.message import OFFSET_BEGINNING, OFFSET_END, Message, TopicPartition, from_fetched


class Fetching:
    """Consumer's reading (a part of `Consumer`: its state is set up in `Consumer.__init__`)."""

    def _hand_out(self, limit: int) -> list[Message]:
        out: list[Message] = []
        while self._buffer and len(out) < limit:
            message = self._buffer.popleft()
            tp = (message.topic(), message.partition())
            if message.offset() < self._skip.get(tp, -1):
                continue
            self._positions[tp] = message.offset() + 1
            out.append(message)
        return out

    def _fetch_group(self, wait_s: float) -> list[Message]:
        member = self._member_id
        if member is None:
            self._rejoin = True
            time.sleep(min(self._backoff_s, wait_s))
            return []
        self._poll_requests += 1  # a request given up on may reach the coordinator after this one: it is stale
        params = {"max_records": int(self._config["max.poll.records"]), "timeout_ms": int(wait_s * 1000),
                  "key_format": "base64", "value_format": "base64", "after": self._polls,
                  "request": self._poll_requests}
        if self._config["fetch.max.bytes"]:
            params["max_bytes"] = int(self._config["fetch.max.bytes"])
        self._given_up.clear()
        try:
            answer = self._session.request("GET", f"{self._group_path()}/members/{quote(member, safe='')}/records",
                                           params=params, timeout_s=wait_s + self._request_s)
        except KafkaException as exc:
            return self._fetch_failed(exc.args[0], wait_s)
        self._polls = answer.get("poll", 0)
        if answer.get("generation") is not None and answer["generation"] != self._generation:
            self._beat(self._session)  # a rebalance happened: learn the assignment before handing anything out
        messages = [from_fetched(r) for r in answer["records"]]
        if any((m.topic(), m.partition()) not in self._assignment for m in messages):
            self._beat(self._session)
        self._serve_group_changes()
        # Records of partitions given up meanwhile were committed up to what was handed out: their new
        # owner reads them from there.
        return [m for m in messages if (m.topic(), m.partition()) not in self._given_up]

    def _fetch_failed(self, error: KafkaError, wait_s: float) -> list[Message]:
        if error.code() in MEMBER_GONE:
            with self._lock:
                self._rejoin = True
            return []
        if error.retriable():
            time.sleep(min(self._backoff_s, wait_s))
            return []
        raise KafkaException(error)

    def _fetch_assigned(self, wait_s: float) -> list[Message]:
        """Assign mode: each partition in turn from the client's own positions; the last one long-polls."""
        plan = sorted(self._assignment)
        if not plan:
            time.sleep(wait_s)
            return []
        self._cursor = (self._cursor + 1) % len(plan)
        plan = plan[self._cursor:] + plan[:self._cursor]
        share = max(int(self._config["max.poll.records"]) // len(plan), 1)
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
        if tp not in self._assignment:
            raise KafkaException(KafkaError(STATE, f"{tp[0]}-{tp[1]} is not assigned to this consumer"))
        offset = partition.offset
        if offset == OFFSET_BEGINNING:
            offset = self._list_offset(tp, "earliest")
        elif offset == OFFSET_END:
            offset = self._list_offset(tp, "latest")
        if offset < 0:
            raise KafkaException(KafkaError(INVALID_ARG, f"cannot seek to offset {partition.offset}"))
        self._drop_buffered({tp})
        if self._mode == "assign":
            self._fetch_at[tp] = offset
            self._positions[tp] = offset
            return
        position = self._positions.get(tp)
        if position is not None and offset < position:
            raise KafkaException(KafkaError(NOT_IMPLEMENTED, "the server keeps a group member's positions and has "
                                                             "no seek: subscribe mode seeks forward only"))
        self._skip[tp] = offset
        self._positions[tp] = offset

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self._positions.get(tp.key(), -1001)) for tp in partitions]

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        found = self._committed_offsets()
        return [TopicPartition(tp.topic, tp.partition, found.get(tp.key(), -1001)) for tp in partitions]

    def _committed_offsets(self) -> dict[TP, int]:
        try:
            answer = self._call("GET", f"{self._group_path()}/offsets")
        except KafkaException as exc:
            if exc.args[0].status() == 404:
                return {}
            raise
        return {(o["topic"], o["partition"]): o["offset"] for o in answer["offsets"]}

    def _drop_buffered(self, partitions: set[TP]) -> None:
        """Forget fetched, not handed out records of these partitions (in place: one buffer for good)."""
        kept = [m for m in self._buffer if (m.topic(), m.partition()) not in partitions]
        self._buffer.clear()
        self._buffer.extend(kept)
