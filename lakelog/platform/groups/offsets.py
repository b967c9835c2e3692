"""Committed offsets in the control table `<root>/_control/consumer_offsets`.

Append-only: the latest row per (group, topic, partition) wins, ordered by the
`committed` time, which this store keeps strictly increasing. Commits are
group-committed (group_commit.py): every commit that arrived while the previous
append was in flight goes into one Delta commit; each caller's future is
answered only when that commit is durable.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from lakelog.platform.clock import column_ms, now_ms
from lakelog.platform.cluster.errors import NotCoordinator
from lakelog.platform.delta.control_table import latest_rows, open_control_table, read_control_table
from lakelog.platform.errors import StorageUnavailable
from lakelog.platform.layout import OFFSETS_TABLE
from lakelog.platform.produce.group_commit import GroupCommit, fail, succeed
from lakelog.platform.records import TopicPartition
from lakelog.platform.storage import STORAGE_ERRORS, STORAGE_RETRY_PAUSE_S, Storage
from lakelog.schemas import CONSUMER_OFFSETS_SCHEMA

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: str | None
    committed_ms: int


@dataclass(frozen=True)
class OffsetRow:
    group: str
    topic: str
    partition: int
    offset: int
    metadata: str | None = None
    generation: int = -1


@dataclass
class _Pending:
    rows: list[OffsetRow]
    deadline: float
    future: Future = field(default_factory=Future)


Durable = Callable[[list[OffsetRow], int], None]


class OffsetStore:
    def __init__(self, storage: Storage, on_durable: Durable, linger_ms: int = 2, timeout_ms: int = 30_000,
                 current: Callable[[], bool] = lambda: True) -> None:
        """`current()`: whether this node's cluster membership is current, asked right before each append.
        A commit accepted before the node was paused past its session timeout must not land after it
        resumes: its groups may have moved to another node and on meanwhile (and back to it: the first round
        after the lapse starts over, `Membership.round`, and appends are refused until it has)."""
        self._storage = storage
        self._current = current
        self._dt = open_control_table(storage, OFFSETS_TABLE, CONSUMER_OFFSETS_SCHEMA)
        self._on_durable = on_durable
        self._timeout_s = timeout_ms / 1000
        self._last_ms = 0
        self.commits = 0
        self.failures = 0
        self._writes = GroupCommit("offsets-writer", self._write, linger_ms)

    # ---- reads --------------------------------------------------------------

    def load(self) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """Every group's latest committed offsets, from the table."""
        self._dt.update_incremental()
        if self._dt.version() <= 0:
            return {}
        table = read_control_table(self._storage, self._dt)
        if table.num_rows == 0:
            return {}
        table = latest_rows(table, ["group", "topic", "partition"], ["committed"])
        stamps = column_ms(table.column("committed")).to_pylist()
        self._last_ms = max(stamps)
        groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        columns = [table.column(n).to_pylist() for n in ("group", "topic", "partition", "offset", "metadata")]
        for group, topic, partition, offset, metadata, stamp in zip(*columns, stamps):
            groups.setdefault(group, {})[(topic, partition)] = CommittedOffset(offset, metadata, stamp)
        return groups

    # ---- writes -------------------------------------------------------------

    def submit(self, rows: list[OffsetRow]) -> Future:
        """Queue rows for the next append; the future completes (None) once they are durable."""
        pending = _Pending(rows, time.monotonic() + self._timeout_s)
        if not rows:
            pending.future.set_result(None)
            return pending.future
        self._writes.submit(pending)
        return pending.future

    def in_flight(self, group_id: str) -> list[Future]:
        """The futures of a group's commits submitted but not yet durable (or failed)."""
        return [p.future for p in self._writes.waiting() if any(row.group == group_id for row in p.rows)]

    def flush(self) -> None:
        """Wait until every commit submitted so far was written (or failed)."""
        self._writes.drain()

    def delete_group(self, group_id: str) -> int:
        """Remove every committed offset of a group from the table (Kafka's DeleteGroups); answers how
        many rows went. A concurrent append conflicting with the delete is retried until the timeout."""
        return self._delete(f'"group" = {_sql(group_id)}', f"the offsets of group {group_id!r}")

    def delete_topic(self, topic: str) -> int:
        """Remove every group's committed offsets of a topic (deleted: Kafka deletes them with it)."""
        return self._delete(f'"topic" = {_sql(topic)}', f"the offsets of topic {topic!r}")

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> int:
        """Remove a group's committed offsets of these partitions (Kafka's OffsetDelete)."""
        if not partitions:
            return 0
        chosen = " OR ".join(f'("topic" = {_sql(t)} AND "partition" = {int(p)})' for t, p in sorted(set(partitions)))
        return self._delete(f'"group" = {_sql(group_id)} AND ({chosen})', f"offsets of group {group_id!r}")

    def _delete(self, predicate: str, what: str) -> int:
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                table = DeltaTable(self._storage.uri(OFFSETS_TABLE), storage_options=self._storage.delta_options())
                metrics = table.delete(predicate)
                return int(metrics.get("num_deleted_rows", 0))
            except (CommitFailedError, *STORAGE_ERRORS) as exc:
                self.failures += 1
                if time.monotonic() >= deadline:
                    raise StorageUnavailable(f"could not delete {what}: {exc}") from exc
                time.sleep(STORAGE_RETRY_PAUSE_S)

    def close(self) -> None:
        """Write what is pending, then stop."""
        self._writes.close()

    def _write(self, batch: list[_Pending]) -> None:
        if not self._current():
            log.warning("offset commits of groups %s refused: this node's cluster membership lapsed",
                        ", ".join(sorted({row.group for pending in batch for row in pending.rows})))
            for pending in batch:
                fail(pending.future, NotCoordinator("this node's cluster membership lapsed (paused, or cut off "
                                                    "from the store): ask the group's coordinator again"))
            return
        latest: dict[tuple[str, str, int], OffsetRow] = {}
        for pending in batch:
            for row in pending.rows:
                latest[(row.group, row.topic, row.partition)] = row  # the last commit in the batch wins
        stamp = max(now_ms(), self._last_ms + 1)
        rows = list(latest.values())
        table = pa.Table.from_pydict(
            {
                "group": [r.group for r in rows],
                "topic": [r.topic for r in rows],
                "partition": [r.partition for r in rows],
                "offset": [r.offset for r in rows],
                "metadata": [r.metadata for r in rows],
                "generation": [r.generation for r in rows],
                "committed": pa.array([stamp] * len(rows), pa.int64()).cast(CONSUMER_OFFSETS_SCHEMA.field(
                    "committed").type),
            },
            schema=CONSUMER_OFFSETS_SCHEMA,
        )
        deadline = max(p.deadline for p in batch)
        while True:
            try:
                write_deltalake(self._dt, table, mode="append")
                break
            except STORAGE_ERRORS as exc:
                self.failures += 1
                if time.monotonic() >= deadline:
                    error = StorageUnavailable(f"could not commit offsets: {exc}")
                    for pending in batch:
                        fail(pending.future, error)
                    return
                time.sleep(STORAGE_RETRY_PAUSE_S)
                try:
                    self._dt.update_incremental()
                except STORAGE_ERRORS:
                    pass
        self._last_ms = stamp
        self.commits += 1
        self._on_durable(rows, stamp)
        for pending in batch:
            succeed(pending.future, None)


def _sql(text: str) -> str:
    """A string literal of a delete predicate, for any text (a group id may hold any character): a doubled
    quote is the only escape in DataFusion's SQL literals; backslashes and the rest stand for themselves."""
    return "'{}'".format(text.replace("'", "''"))
