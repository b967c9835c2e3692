"""The pure part of `_control/transactions`' compaction: which rows it keeps, when it is due, the commit it
writes."""

from __future__ import annotations

import orjson
import pyarrow as pa
from deltalake.transaction import AddAction
from hypothesis import given
from hypothesis import strategies as st

from lakelog.platform.delta.control_table import latest_rows
from lakelog.platform.transactions.store import TRANSACTIONS_SCHEMA
from lakelog.platform.transactions.store_compaction import ROWS_PER_ID, compacted, compaction_commit, compaction_due


def row(tid: str, written: int, epoch: int) -> dict:
    return {"transactional_id": tid, "producer_id": 7, "producer_epoch": epoch, "last_producer_id": -1,
            "last_producer_epoch": -1, "number": epoch, "state": "Empty", "timeout_ms": 1000, "started_ms": -1,
            "updated_ms": written, "partitions": "[]", "groups": "[]", "offsets": "[]", "written": written}


ROWS = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 50)), max_size=60).map(
    lambda pairs: pa.Table.from_pylist([row(t, w, i) for i, (t, w) in enumerate(pairs)], schema=TRANSACTIONS_SCHEMA))


@given(ROWS)
def test_compaction_keeps_exactly_each_ids_latest_row(rows: pa.Table) -> None:
    kept = compacted(rows).to_pylist()
    ids = {r["transactional_id"] for r in rows.to_pylist()}
    assert sorted(r["transactional_id"] for r in kept) == sorted(ids)  # one row per id, none lost
    for r in kept:  # the row a reader of the whole table picks: the highest `written`, of equal ones the later
        same = [x for x in rows.to_pylist() if x["transactional_id"] == r["transactional_id"]]
        assert r == max(enumerate(same), key=lambda ix: (ix[1]["written"], ix[0]))[1]
    assert [r["written"] for r in kept] == sorted(r["written"] for r in kept)


@given(ROWS, ROWS)
def test_reading_after_compaction_and_later_appends_is_reading_everything(before: pa.Table, after: pa.Table) -> None:
    """A row appended after the rewrite (beside the compacted file) is read as it was before it."""
    after = pa.Table.from_pylist([{**r, "written": r["written"] + 100} for r in after.to_pylist()],
                                 schema=TRANSACTIONS_SCHEMA)
    whole = latest_rows(pa.concat_tables([before, after]), ["transactional_id"], ["written"])
    rewritten = latest_rows(pa.concat_tables([compacted(before), after]), ["transactional_id"], ["written"])
    assert sorted(whole.to_pylist(), key=str) == sorted(rewritten.to_pylist(), key=str)


def test_compaction_is_due_above_the_floor_and_rows_per_id() -> None:
    assert not compaction_due(1_000, 1, min_rows=1_000)
    assert compaction_due(1_001, 1, min_rows=1_000)
    assert not compaction_due(5_000, 2_000, min_rows=1_000)  # many ids: each has few rows
    assert compaction_due(ROWS_PER_ID * 2_000 + 1, 2_000, min_rows=1_000)


def test_the_commit_removes_the_files_read_and_adds_the_compacted_one() -> None:
    add = AddAction("part-new.parquet", 10, {}, 5, True, "{}")
    lines = [orjson.loads(line) for line in compaction_commit(4, [("a.parquet", 3), ("b.parquet", 4)], add, 9)
             .splitlines()]
    assert lines[0]["commitInfo"]["readVersion"] == 4
    assert [(x["remove"]["path"], x["remove"]["size"]) for x in lines if "remove" in x] == \
        [("a.parquet", 3), ("b.parquet", 4)]
    assert [x["add"]["path"] for x in lines if "add" in x] == ["part-new.parquet"]
