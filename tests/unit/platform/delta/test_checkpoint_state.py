"""Checkpoints from the writer's state: which appends make the next checkpoint, and the rows it holds."""

from __future__ import annotations

import pyarrow as pa
from deltalake.transaction import AddAction, Transaction

from lakelog.platform.delta.checkpoint import Append, CheckpointState, checkpoint_rows

ADD = pa.struct([pa.field("path", pa.string(), nullable=False),
                 pa.field("partitionValues", pa.map_(pa.string(), pa.string()), nullable=False),
                 pa.field("size", pa.int64(), nullable=False), pa.field("modificationTime", pa.int64(), nullable=False),
                 pa.field("dataChange", pa.bool_(), nullable=False), pa.field("stats", pa.string())])
TXN = pa.struct([pa.field("appId", pa.string(), nullable=False), pa.field("version", pa.int64(), nullable=False),
                 pa.field("lastUpdated", pa.int64())])
SCHEMA = pa.schema([pa.field("add", ADD), pa.field("txn", TXN)])


def append(version: int, *txns: tuple[str, int]) -> Append:
    return Append(version, [AddAction(f"f{version}", 10, {}, 0, True, "{}")], [Transaction(a, v) for a, v in txns])


def base() -> pa.Table:
    return pa.table({
        "add": pa.array([{"path": "f0", "partitionValues": [], "size": 1, "modificationTime": 0, "dataChange": True,
                          "stats": "{}"}, None, None], ADD),
        "txn": pa.array([None, {"appId": "p0", "version": 5, "lastUpdated": 0},
                         {"appId": "p1", "version": 7, "lastUpdated": 0}], TXN),
    }, schema=SCHEMA)


def test_a_checkpoint_needs_every_version_since_the_base() -> None:
    state = CheckpointState(keep=10)
    state.record(append(1))
    assert state.plan(1) is None  # no base
    state.install(0, base())
    assert state.plan(1) is not None
    state.record(append(3))  # version 2 was not seen one by one
    assert state.plan(3) is None
    state.install(3, base())  # delta-rs wrote 3: its rows are the base
    state.record(append(4))
    planned = state.plan(4)
    assert planned is not None and [a.version for a in planned[1]] == [4]
    state.forget()
    assert state.plan(4) is None and not state.has_base


def test_only_the_latest_appends_are_kept() -> None:
    state = CheckpointState(keep=2)
    state.install(0, base())
    for version in (1, 2, 3):
        state.record(append(version))
    assert state.plan(3) is None  # version 1 was dropped
    state.install(1, base())
    assert [a.version for a in state.plan(3)[1]] == [2, 3]  # type: ignore[index]


def test_the_rows_add_the_new_files_and_keep_each_set_transaction_at_its_latest_version() -> None:
    rows = checkpoint_rows(base(), [append(1, ("p0", 6)), append(2, ("p0", 8), ("p2", 1))])
    assert rows.schema == SCHEMA
    adds = sorted(r["path"] for r in rows.column("add").to_pylist() if r)
    txns = {r["appId"]: r["version"] for r in rows.column("txn").to_pylist() if r}
    assert adds == ["f0", "f1", "f2"]
    assert txns == {"p0": 8, "p1": 7, "p2": 1}
    assert rows.num_rows == 6  # one action per row
