"""file_changes: a maintenance commit in Delta's own terms (a roll is an OPTIMIZE with dataChange=false,
retention and compaction a DELETE), and what delta-rs reads of it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from lakelog.platform.delta.delta_log import added_paths, commit_uri, committed_producers, removed_paths
from lakelog.platform.delta.file_changes import (
    MAINTENANCE_JOB,
    Removed,
    encode_file_changes,
    record_ranges,
    removed_files,
)
from lakelog.platform.segments.index import SegmentFile
from lakelog.platform.storage import Storage
from lakelog.platform.delta.table_retention import interval, retention_properties


def segment(path: str, partition: int, first: int, last: int, row_groups: tuple[int, ...] | None = None) -> SegmentFile:
    return SegmentFile(path, partition, 100, last - first + 1, first, last, 0, 0, row_groups=row_groups)


def add(path: str, records: int) -> AddAction:
    return AddAction(path, 300, {}, 1_700_000_000_000, True, json.dumps({"numRecords": records}))


def lines(commit: bytes) -> list[dict]:
    return [json.loads(line) for line in commit.splitlines()]


SHARED = [segment("shared.parquet", 0, 0, 4, (0,)), segment("shared.parquet", 1, 0, 2, (0,))]


def test_a_file_holding_several_partitions_is_removed_once_with_every_slice_it_held() -> None:
    sizes = {"shared.parquet": 777}
    (removed,) = removed_files(SHARED, lambda s: sizes[s.path], lambda p: {})
    assert removed == Removed("shared.parquet", 777, {}, ((0, 0, 4), (1, 0, 2)), 8)


def test_a_roll_is_an_optimize_whose_every_file_action_changes_no_data() -> None:
    removed = removed_files(SHARED, lambda s: 777, lambda p: {})
    commit = encode_file_changes([add("p0.parquet", 5), add("p1.parquet", 3)], removed, False, 41, 1_000,
                                 {MAINTENANCE_JOB: "roll"})
    info, *actions = lines(commit)
    info = info["commitInfo"]
    assert info["operation"] == "OPTIMIZE" and info["readVersion"] == 41 and info["isBlindAppend"] is False
    assert info["operationParameters"] == {"predicate": '["partition IN (0, 1)"]', "zOrderBy": "[]", "auto": False}
    assert info["operationMetrics"] == {"numRemovedFiles": "1", "numAddedFiles": "2", "numRemovedBytes": "777",
                                        "numAddedBytes": "600"}
    assert info[MAINTENANCE_JOB] == "roll"
    assert [next(iter(a)) for a in actions] == ["add", "add", "remove"]
    assert all(a[kind]["dataChange"] is False for a in actions for kind in a)  # the adds given said True
    assert actions[2]["remove"] == {"path": "shared.parquet", "dataChange": False, "deletionTimestamp": 1_000,
                                    "extendedFileMetadata": True, "partitionValues": {}, "size": 777}
    assert committed_producers(commit) == set()  # no new batches: writers keep their producer state
    assert added_paths(commit) == ["p0.parquet", "p1.parquet"] and removed_paths(commit) == {"shared.parquet": 1_000}


def test_retention_is_a_delete_whose_predicate_is_exactly_the_removed_offsets() -> None:
    removed = removed_files([segment("a", 0, 0, 9), segment("b", 0, 10, 19), segment("c", 2, 5, 9)],
                            lambda s: 50, lambda p: {"partition": str(p)})
    info, *actions = lines(encode_file_changes([], removed, True, 7, 1_000, {}))
    info = info["commitInfo"]
    assert info["operation"] == "DELETE"
    assert json.loads(info["operationParameters"]["predicate"]) == [
        "partition = 0 AND offset BETWEEN 0 AND 19", "partition = 2 AND offset BETWEEN 5 AND 9"]
    assert info["operationMetrics"]["numDeletedRows"] == "25" and info["operationMetrics"]["numCopiedRows"] == "0"
    assert [a["remove"]["dataChange"] for a in actions] == [True, True, True]
    assert actions[2]["remove"]["partitionValues"] == {"partition": "2"}


def test_compaction_is_a_delete_that_counts_the_records_it_kept() -> None:
    removed = removed_files([segment("a", 0, 0, 9)], lambda s: 50, lambda p: {})
    info, added, _ = lines(encode_file_changes([add("kept.parquet", 4)], removed, True, 7, 1_000, {}))
    metrics = info["commitInfo"]["operationMetrics"]
    assert info["commitInfo"]["operation"] == "DELETE" and added["add"]["dataChange"] is True
    assert (metrics["numDeletedRows"], metrics["numCopiedRows"]) == ("6", "4")
    (predicate,) = json.loads(info["commitInfo"]["operationParameters"]["predicate"])
    assert predicate.startswith("partition = 0 AND offset BETWEEN 0 AND 9 AND (superseded")


def test_ranges_that_do_not_touch_stay_apart() -> None:
    removed = [Removed("a", 1, {}, ((0, 0, 4),), 5), Removed("b", 1, {}, ((0, 8, 9),), 2)]
    assert record_ranges(removed) == ["partition = 0 AND offset BETWEEN 0 AND 4",
                                      "partition = 0 AND offset BETWEEN 8 AND 9"]


def test_delta_rs_shows_the_operations_in_the_tables_history(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    DeltaTable.create(uri, schema=pa.schema([("partition", pa.int32()), ("offset", pa.int64())]))
    storage = Storage.open(str(tmp_path))
    removed = [Removed("gone.parquet", 10, {}, ((0, 0, 0),), 1)]
    assert storage.put_if_absent(commit_uri(uri, 1), encode_file_changes([], removed, False, 0, 1_000, {}))
    assert storage.put_if_absent(commit_uri(uri, 2), encode_file_changes([], removed, True, 1, 2_000, {}))
    history = DeltaTable(uri).history()
    assert [h["operation"] for h in history[:2]] == ["DELETE", "OPTIMIZE"]  # newest first
    assert history[1]["operationParameters"]["zOrderBy"] == "[]"


@pytest.mark.parametrize(("ms", "text"), [(60_000, "interval 60 seconds"), (0, "interval 0 seconds"),
                                          (1_500, "interval 1500 milliseconds")])
def test_retention_intervals_are_exact(ms: int, text: str) -> None:
    assert interval(ms) == text
    assert retention_properties(ms)["delta.deletedFileRetentionDuration"] == text


def test_a_negative_retention_is_refused() -> None:
    with pytest.raises(ValueError):
        interval(-1)
