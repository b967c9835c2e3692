"""Share-partition state on the root: `_control/share_state`, a row per saved state of a (group, topic,
partition), the latest row winning (ordered by `written`, kept strictly increasing as the offsets store keeps
`committed`). What Kafka's share coordinator keeps in `__share_group_state`, here a Delta table any reader
can query: the start offset, and each in-flight record's state and delivery count.

Saves are group-committed: every save that arrived while the previous append was in flight goes into one
Delta commit, and each caller's future is answered once that commit is durable. A share coordinator answers
an acknowledgement or a delivery only after that, so a node that loads the state after a crash never
delivers a record fewer times than a consumer saw it, nor again once it was accepted. A commit is one PUT of
its data file and one put-if-absent of its commit file, checkpoints and old commit files are left to a
background thread (`state_table.py`), and every COMPACT_EVERY appends the table is rewritten to its latest
rows.

Group configs set by IncrementalAlterConfigs on a GROUP resource (`share.auto.offset.reset`, ...) are rows of
the same table with partition -1 and the config as JSON in `records`.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction

from lakelog.platform.clock import now_ms
from lakelog.platform.delta.control_table import latest_rows, read_control_table
from lakelog.platform.errors import StorageUnavailable
from lakelog.platform.layout import SHARE_STATE_TABLE
from lakelog.platform.produce.group_commit import GroupCommit, fail, succeed
from lakelog.platform.share.partition import SharePartition
from lakelog.platform.share.state_table import StateTable
from lakelog.platform.storage import STORAGE_ERRORS, STORAGE_RETRY_PAUSE_S, Storage

log = logging.getLogger(__name__)

SHARE_STATE_SCHEMA = pa.schema([
    pa.field("group", pa.string(), nullable=False),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),  # -1: the group's configs
    pa.field("start_offset", pa.int64(), nullable=False),
    pa.field("next_offset", pa.int64(), nullable=False),
    pa.field("records", pa.string(), nullable=False),  # JSON [[first offset, last offset, state, delivery count], ...]
    pa.field("deleted", pa.bool_(), nullable=False),  # the share-partition's state was deleted
    pa.field("written", pa.int64(), nullable=False),
])
CONFIGS = -1
COMPACT_EVERY = 50  # appends between rewrites to the latest rows (the table's checkpoint interval)
# A busy share group commits many times a second, and a Delta snapshot costs more with every commit file left in
# _delta_log and every removed file a checkpoint keeps: commit files older than the last checkpoint go after 10 s,
# a compaction's removes leave the checkpoints after 10 s too (no one time-travels share state).
SHARE_STATE_PROPERTIES: dict[str, str | None] = {"delta.logRetentionDuration": "interval 10 seconds",
                                                 "delta.deletedFileRetentionDuration": "interval 10 seconds"}
Key = tuple[str, str, int]


@dataclass
class _Save:
    rows: dict[Key, tuple[int, int, str, bool]]
    deadline: float
    future: Future = field(default_factory=Future)


class ShareStateStore:
    def __init__(self, storage: Storage, timeout_ms: int = 30_000) -> None:
        self._storage = storage
        self.table = StateTable(storage, SHARE_STATE_TABLE, SHARE_STATE_SCHEMA, SHARE_STATE_PROPERTIES)
        self._timeout_s = timeout_ms / 1000
        self._last_written = 0
        self.commits = 0
        self.compactions = 0
        self._appends = 0  # since the last compaction
        self._writes = GroupCommit("share-state-writer", self._write, linger_ms=0)

    def load(self, group_id: str | None = None) -> tuple[dict[Key, SharePartition], dict[str, dict[str, str]]]:
        """Every share-partition's latest state (records acquired when it was saved are available again: their
        locks did not outlive the node), and every group's configs."""
        snapshot = self.table.snapshot()
        if snapshot.version() <= 0:
            return {}, {}
        table = read_control_table(self._storage, snapshot)
        if table.num_rows == 0:
            return {}, {}
        table = latest_rows(table, ["group", "topic", "partition"], ["written"])
        self._last_written = max(self._last_written, *table.column("written").to_pylist())
        if group_id is not None:
            table = table.filter(pc.equal(table.column("group"), group_id))
        partitions: dict[Key, SharePartition] = {}
        configs: dict[str, dict[str, str]] = {}
        names = ("group", "topic", "partition", "start_offset", "next_offset", "records", "deleted")
        for group, topic, partition, start, end, records, deleted in zip(*(table.column(n).to_pylist() for n in names)):
            if deleted:
                continue
            if partition == CONFIGS:
                configs[group] = json.loads(records)
            else:
                partitions[(group, topic, partition)] = decode(start, end, records)
        return partitions, configs

    def save(self, states: dict[Key, SharePartition | None]) -> Future:
        """Queue the states (None: deleted) for the next append; the future answers once they are durable."""
        rows = {key: ((0, 0, "[]", True) if state is None else
                      (state.start_offset, state.next_offset, encode(state), False)) for key, state in states.items()}
        return self._submit(rows)

    def save_configs(self, group: str, configs: dict[str, str]) -> Future:
        return self._submit({(group, "", CONFIGS): (0, 0, json.dumps(configs, sort_keys=True), not configs)})

    def delete_group(self, group: str) -> None:
        """Remove every row of a group (its share-partitions and configs)."""
        deadline = time.monotonic() + self._timeout_s
        predicate = "\"group\" = '{}'".format(group.replace("'", "''"))
        while True:
            try:
                DeltaTable(self._storage.uri(SHARE_STATE_TABLE),
                           storage_options=self._storage.delta_options()).delete(predicate)
                return
            except (CommitFailedError, *STORAGE_ERRORS) as exc:
                if time.monotonic() >= deadline:
                    raise StorageUnavailable(f"could not delete share group {group!r}: {exc}") from exc
                time.sleep(STORAGE_RETRY_PAUSE_S)

    def flush(self) -> None:
        self._writes.drain()

    def close(self) -> None:
        self._writes.close()
        self.table.close()

    def _submit(self, rows: dict[Key, tuple[int, int, str, bool]]) -> Future:
        save = _Save(rows, time.monotonic() + self._timeout_s)
        if not rows:
            save.future.set_result(None)
        else:
            self._writes.submit(save)
        return save.future

    def _write(self, batch: list[_Save]) -> None:
        latest: dict[Key, tuple[int, int, str, bool]] = {}
        for save in batch:
            latest.update(save.rows)  # the last save in the batch wins
        stamp = max(now_ms(), self._last_written + 1)
        keys = list(latest)
        values = [latest[k] for k in keys]
        table = pa.Table.from_pydict({
            "group": [k[0] for k in keys], "topic": [k[1] for k in keys], "partition": [k[2] for k in keys],
            "start_offset": [v[0] for v in values], "next_offset": [v[1] for v in values],
            "records": [v[2] for v in values], "deleted": [v[3] for v in values], "written": [stamp] * len(keys),
        }, schema=SHARE_STATE_SCHEMA)
        deadline = max(s.deadline for s in batch)
        add: AddAction | None = None
        while True:
            try:
                if add is None:
                    add = self.table.write_data(table)
                self.table.append(add, table)  # tried again with the same file: a commit that landed is found
                break
            except STORAGE_ERRORS as exc:
                if time.monotonic() >= deadline:
                    for save in batch:
                        fail(save.future, StorageUnavailable(f"could not save share-group state: {exc}"))
                    return
                time.sleep(STORAGE_RETRY_PAUSE_S)
        self._last_written = stamp
        self.commits += 1
        for save in batch:
            succeed(save.future, None)
        self._appends += 1
        if self._appends >= COMPACT_EVERY:
            self._compact()

    def _compact(self) -> None:
        """Rewrite the table to its latest row per key, in one file: a Delta commit costs more with every file
        the table holds, and a busy share group appends a file per save. On this writer's thread, so no save of
        this node is missed. From the rows this writer holds when it made every commit since its last
        compaction (nothing read); else from the table read whole, through delta-rs, whose overwrite fails when
        another node appended meanwhile: it is tried again after the next COMPACT_EVERY appends."""
        self._appends = 0
        try:
            held = self.table.held_rows()
            if held is not None and self.table.replace(_latest(held)):
                self.compactions += 1
                return
            snapshot = self.table.snapshot()
            self.table.overwrite(snapshot, _latest(read_control_table(self._storage, snapshot)))
            self.compactions += 1
        except (CommitFailedError, *STORAGE_ERRORS) as exc:
            log.info("share-state compaction skipped (tried again later): %s", exc)


def _latest(rows: pa.Table) -> pa.Table:
    """The latest row per key, those of deleted states left out."""
    latest = latest_rows(rows, ["group", "topic", "partition"], ["written"])
    return latest.filter(pc.invert(latest.column("deleted"))).cast(SHARE_STATE_SCHEMA)


def encode(state: SharePartition) -> str:
    """The in-flight records as saved, runs of consecutive offsets with one state and delivery count as
    [first, last, state, count] (gaps left out)."""
    return json.dumps(state.runs(), separators=(",", ":"))


def decode(start: int, end: int, records: str) -> SharePartition:
    """A saved state, its acquired records available again: a lock does not outlive its node."""
    return SharePartition.restored(start, end, [tuple(run) for run in json.loads(records)])
