"""`_control/share_state` written by the share-state store's own commits (state_table.py) on a local root: what
it saves loads back, any Delta reader reads the same rows (delta-rs from a fresh DeltaTable, DuckDB's delta
extension), through checkpoints, compactions, another writer's commits, and failed or ambiguous puts."""

from __future__ import annotations

import os
from concurrent.futures import Future

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakelog.platform.delta.control_table import latest_rows, open_control_table, read_control_table
from lakelog.platform.delta.delta_log import added_paths, checkpoint_name, commit_uri, versions
from lakelog.platform.errors import StorageUnavailable
from lakelog.platform.layout import SHARE_STATE_TABLE
from lakelog.platform.share import state_table
from lakelog.platform.share.partition import SharePartition
from lakelog.platform.share.state_store import (
    COMPACT_EVERY,
    SHARE_STATE_PROPERTIES,
    SHARE_STATE_SCHEMA,
    ShareStateStore,
    _latest,
)
from lakelog.platform.share.state_table import interval_s
from lakelog.platform.storage import Storage
from tests.delta_readers import connect


def state(end: int) -> SharePartition:
    return SharePartition.restored(0, end, [(0, end - 1, 2, 1)])


def saved(store: ShareStateStore, key: tuple[str, str, int], end: int) -> None:
    future: Future = store.save({key: state(end)})
    future.result(timeout=30)


def delta_rs_rows(root: str) -> list[dict]:
    """Every row a fresh delta-rs reader sees, latest per key, deleted states left out."""
    table = DeltaTable(Storage.open(root).uri(SHARE_STATE_TABLE)).to_pyarrow_table()
    latest = latest_rows(table, ["group", "topic", "partition"], ["written"]).to_pylist()
    return sorted((r for r in latest if not r["deleted"]), key=lambda r: (r["group"], r["topic"], r["partition"]))


def duckdb_rows(root: str) -> list[tuple]:
    uri = Storage.open(root).uri(SHARE_STATE_TABLE)
    with connect() as con:
        return sorted(con.execute(f"SELECT \"group\", topic, \"partition\", next_offset, written, deleted "
                                  f"FROM delta_scan('{uri}')").fetchall())


def all_rows(root: str) -> list[tuple]:
    table = DeltaTable(Storage.open(root).uri(SHARE_STATE_TABLE)).to_pyarrow_table()
    return sorted((r["group"], r["topic"], r["partition"], r["next_offset"], r["written"], r["deleted"])
                  for r in table.to_pylist())


def loaded(root: str) -> dict:
    store = ShareStateStore(Storage.open(root))
    try:
        partitions, configs = store.load()
    finally:
        store.close()
    return {key: (p.start_offset, p.next_offset, p.runs()) for key, p in partitions.items()}, configs


def test_saves_load_back_and_read_alike_through_a_checkpoint_and_compactions(tmp_path) -> None:
    root = str(tmp_path)
    store = ShareStateStore(Storage.open(root))
    expected = {}
    for i in range(2 * COMPACT_EVERY + 7):  # past two compactions and the checkpoints of versions 50 and 100
        key = ("g", "t", i % 5)
        saved(store, key, i + 1)
        expected[key] = (0, i + 1, [(0, i, 2, 1)])
    store.save_configs("g", {"share.auto.offset.reset": "earliest"}).result(timeout=30)
    store.save({("g", "t", 4): None}).result(timeout=30)  # deleted
    del expected[("g", "t", 4)]
    assert store.table.wait()
    assert store.compactions == 2 and store.commits == 2 * COMPACT_EVERY + 9
    log_dir = f"{store.table.uri}/_delta_log"
    assert os.path.exists(f"{log_dir}/{checkpoint_name(50)}") and os.path.exists(f"{log_dir}/{checkpoint_name(100)}")
    store.close()

    assert loaded(root) == (expected, {"g": {"share.auto.offset.reset": "earliest"}})
    rows = delta_rs_rows(root)
    assert [(r["group"], r["topic"], r["partition"], r["next_offset"]) for r in rows] == \
        [("g", "", -1, 0)] + [(*key, value[1]) for key, value in sorted(expected.items())]
    assert duckdb_rows(root) == all_rows(root)  # DuckDB reads exactly the rows delta-rs reads
    fresh = DeltaTable(Storage.open(root).uri(SHARE_STATE_TABLE))
    whole = fresh.to_pyarrow_table()  # every column, as delta-rs reads the files this store wrote
    assert whole.schema.remove_metadata() == SHARE_STATE_SCHEMA.remove_metadata()
    assert sorted(whole.to_pylist(), key=str) == \
        sorted(read_control_table(Storage.open(root), fresh).to_pylist(), key=str)
    # the compactions left one file of latest rows and the appends since
    assert len(DeltaTable(Storage.open(root).uri(SHARE_STATE_TABLE)).file_uris()) == 1 + 9


def test_a_compaction_after_another_writers_commit_reads_the_table_whole(tmp_path) -> None:
    root = str(tmp_path)
    store = ShareStateStore(Storage.open(root))
    other = ShareStateStore(Storage.open(root))
    saved(other, ("h", "t", 0), 3)  # version 1: the other writer's
    for i in range(COMPACT_EVERY):  # the first collides with version 1, then catches up
        saved(store, ("g", "t", i % 3), i + 1)
    store.flush()  # the compaction follows the answer
    assert store.compactions == 1  # through delta-rs: this writer did not make every commit
    saved(other, ("h", "t", 1), 4)  # the other one catches up past the compaction
    saved(store, ("g", "t", 0), 99)
    store.close()
    other.close()
    partitions, _ = loaded(root)
    assert {key: value[1] for key, value in partitions.items()} == \
        {("h", "t", 0): 3, ("h", "t", 1): 4, ("g", "t", 0): 99, ("g", "t", 1): 50, ("g", "t", 2): 48}
    assert duckdb_rows(root) == all_rows(root)
    assert versions(Storage.open(root), Storage.open(root).uri(SHARE_STATE_TABLE)) == list(range(COMPACT_EVERY + 5))


def test_two_writers_interleaved_lose_no_row_and_never_share_a_version(tmp_path) -> None:
    root = str(tmp_path)
    first, second = ShareStateStore(Storage.open(root)), ShareStateStore(Storage.open(root))
    for i in range(30):
        saved(first, ("a", "t", i), i + 1)
        saved(second, ("b", "t", i), i + 1)
    first.close()
    second.close()
    partitions, _ = loaded(root)
    assert len(partitions) == 60
    assert first.commits + second.commits == 60


def test_a_writer_idle_while_others_committed_and_cleaned_lists_the_log_before_its_put(tmp_path) -> None:
    """Versions another writer committed and cleaned since look free: a put there would be lost to readers."""
    root = str(tmp_path)
    idle = ShareStateStore(Storage.open(root))
    busy = ShareStateStore(Storage.open(root))
    for i in range(COMPACT_EVERY + 5):
        saved(busy, ("b", "t", 0), i + 1)
    busy.flush()
    assert busy.table.wait()
    busy.close()
    storage = Storage.open(root)
    uri = storage.uri(SHARE_STATE_TABLE)
    storage.delete_files([commit_uri(uri, v) for v in range(50)])  # as a cleanup behind the checkpoint of 50
    idle.table.fresh_s = 0.0  # its known version (0) is as old as the retention
    saved(idle, ("a", "t", 0), 7)
    idle.close()
    assert versions(storage, uri)[-1] == COMPACT_EVERY + 7  # after the busy writer's appends and compaction
    assert {key: value[1] for key, value in loaded(root)[0].items()} == \
        {("a", "t", 0): 7, ("b", "t", 0): COMPACT_EVERY + 5}


def test_an_ambiguous_put_that_landed_is_not_committed_twice(tmp_path, monkeypatch) -> None:
    root = str(tmp_path)
    store = ShareStateStore(Storage.open(root))
    put = Storage.put_if_absent
    failures = []

    def landed_then_failed(self: Storage, uri: str, data: bytes) -> bool:
        done = put(self, uri, data)
        if not failures:
            failures.append(uri)
            raise OSError("connection reset after the write")
        return done

    monkeypatch.setattr(Storage, "put_if_absent", landed_then_failed)
    saved(store, ("g", "t", 0), 5)
    monkeypatch.setattr(Storage, "put_if_absent", put)
    saved(store, ("g", "t", 0), 6)
    store.close()
    storage = Storage.open(root)
    uri = storage.uri(SHARE_STATE_TABLE)
    assert failures == [commit_uri(uri, 1)]
    assert versions(storage, uri) == [0, 1, 2]  # the first save's commit once, the second's after it
    assert len({p for v in (1, 2) for p in added_paths(storage.read_bytes(commit_uri(uri, v)))}) == 2
    assert loaded(root)[0][("g", "t", 0)][1] == 6


def test_a_save_fails_once_storage_failed_until_its_deadline(tmp_path, monkeypatch) -> None:
    store = ShareStateStore(Storage.open(str(tmp_path)), timeout_ms=200)

    def unavailable(self: Storage, uri: str, data: bytes) -> bool:
        raise OSError("store unavailable")

    monkeypatch.setattr(Storage, "put_if_absent", unavailable)
    with pytest.raises(StorageUnavailable):
        saved(store, ("g", "t", 0), 5)
    monkeypatch.undo()
    saved(store, ("g", "t", 0), 6)  # the writer goes on
    store.close()
    assert loaded(str(tmp_path))[0][("g", "t", 0)][1] == 6


def test_old_commit_files_and_removed_data_files_are_deleted_after_their_delays(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(state_table, "REMOVED_FILE_DELETE_DELAY_S", 0.0)
    root = str(tmp_path)
    store = ShareStateStore(Storage.open(root))
    store.table.log_kept_s = 0.0
    first_file = None
    for i in range(2 * COMPACT_EVERY + 1):
        saved(store, ("g", "t", i % 2), i + 1)
        if first_file is None:
            first_file = DeltaTable(store.table.uri).file_uris()[0]
        store.table.wait()
    store.close()
    storage = Storage.open(root)
    kept = versions(storage, store.table.uri)
    assert kept[0] == 100 and kept[-1] == 2 * COMPACT_EVERY + 3  # commits before the checkpoint at 100: gone
    assert first_file is not None and not os.path.exists(first_file)  # compacted away, then deleted
    assert loaded(root)[0] == {("g", "t", 0): (0, 101, [(0, 100, 2, 1)]), ("g", "t", 1): (0, 100, [(0, 99, 2, 1)])}
    assert duckdb_rows(root) == all_rows(root)


def test_a_table_created_without_the_share_state_properties_is_given_them(tmp_path) -> None:
    storage = Storage.open(str(tmp_path))
    open_control_table(storage, SHARE_STATE_TABLE, SHARE_STATE_SCHEMA,
                       {"delta.logRetentionDuration": "interval 10 seconds"})  # as it was created before
    store = ShareStateStore(storage)
    saved(store, ("g", "t", 0), 3)  # after the properties' commit (version 1)
    store.close()
    configuration = DeltaTable(storage.uri(SHARE_STATE_TABLE)).metadata().configuration
    assert all(configuration[key] == value for key, value in SHARE_STATE_PROPERTIES.items())
    assert versions(storage, storage.uri(SHARE_STATE_TABLE)) == [0, 1, 2]
    assert loaded(str(tmp_path))[0][("g", "t", 0)][1] == 3


def test_a_compacted_table_of_deleted_states_only_is_empty() -> None:
    rows = pa.Table.from_pylist([{"group": "g", "topic": "t", "partition": 0, "start_offset": 0, "next_offset": 0,
                                  "records": "[]", "deleted": True, "written": 1}], schema=SHARE_STATE_SCHEMA)
    assert _latest(rows).num_rows == 0


def test_delta_intervals_in_seconds() -> None:
    assert interval_s("interval 10 seconds") == 10.0
    assert interval_s("interval 7 days") == 7 * 86400.0
    assert interval_s("interval 1 minute") == 60.0
    assert interval_s("10 seconds") is None and interval_s(None) is None
