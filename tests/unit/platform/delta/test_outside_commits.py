"""Other writers' commits to a topic table, classified (outside_commits.py): a rewrite that keeps each
partition's records is fine; any other change of records refuses the partitions it touched; lakelog's own
commits are never checked; and the index checks that find an append from outside (also after a restart)."""

from __future__ import annotations

import orjson
import pytest

from lakelog.kafka_api.errors import CODES, error_code
from lakelog.ingest_api.errors import status_of
from lakelog.platform.segments.content_index import DataFile
from lakelog.platform.delta.delta_log import COMMIT_ID
from lakelog.platform.errors import DataChangedOutside
from lakelog.platform.segments.index import SegmentFile
from lakelog.platform.delta.outside_commits import (
    EVERY_PARTITION,
    Refusals,
    below_log_start,
    beyond_log_end,
    changed_records,
    duplicated,
    parse_commit,
    refused_by,
)


def entry(path: str, partition: int, lo: int, hi: int, count: int | None = None) -> SegmentFile:
    return SegmentFile(path, partition, 10, hi - lo + 1 if count is None else count, lo, hi, 0, 0)


def commit(info: dict, adds: list[str] = (), removes: list[str] = (), data_change: bool = False) -> bytes:
    lines = [{"commitInfo": info}]
    lines += [{"add": {"path": p, "partitionValues": {}, "size": 1, "modificationTime": 2, "dataChange": data_change,
                       "stats": "{}"}} for p in adds]
    lines += [{"remove": {"path": p, "dataChange": data_change, "deletionTimestamp": 3, "size": 1}} for p in removes]
    return b"\n".join(orjson.dumps(line) for line in lines)


OPTIMIZE = {"operation": "OPTIMIZE", "engineInfo": "delta-rs:py-1.6.6"}
FILES = {
    "a": [entry("a", 0, 0, 9), entry("a", 1, 0, 4)],  # lakelog's shared flush file
    "b": [entry("b", 0, 10, 19, count=7)],  # lakelog's compacted file: 7 records in 10..19
    "opt": [entry("opt", 0, 0, 9), entry("opt", 0, 11, 12), entry("opt", 0, 14, 18), entry("opt", 1, 0, 4)],
}


def known(file: DataFile) -> list[SegmentFile] | None:
    return FILES.get(file.path)


def test_a_rewrite_keeping_every_record_is_fine() -> None:
    parsed = parse_commit(12, commit(OPTIMIZE, adds=["opt"], removes=["a", "b"]))
    assert (parsed.version, parsed.operation, parsed.lakelog, parsed.data_change) == (12, "OPTIMIZE", False, False)
    assert [f.path for f in parsed.added] == ["opt"] and [f.path for f in parsed.removed] == ["a", "b"]
    assert refused_by(parsed, known) == {}


def test_a_rewrite_that_drops_or_moves_records_refuses_those_partitions() -> None:
    dropped = [entry("x", 0, 0, 9), entry("x", 0, 11, 12), entry("x", 1, 0, 4)]  # 14..18 of partition 0 gone
    assert changed_records(FILES["a"] + FILES["b"], dropped) == [0]
    moved = [entry("x", 0, 0, 9), entry("x", 0, 11, 12), entry("x", 0, 20, 24), entry("x", 1, 0, 4)]
    assert changed_records(FILES["a"] + FILES["b"], moved) == [0]
    files = {**FILES, "x": dropped}
    refused = refused_by(parse_commit(4, commit(OPTIMIZE, ["x"], ["a", "b"])), lambda f: files.get(f.path))
    assert list(refused) == [0] and "OPTIMIZE by delta-rs:py-1.6.6 at version 4" in refused[0]


@pytest.mark.parametrize("operation", ["WRITE", "DELETE", "UPDATE", "MERGE", "RESTORE"])
def test_any_data_change_refuses_every_partition_its_files_touched(operation: str) -> None:
    info = {"operation": operation, "engineInfo": "Apache-Spark/3.5 Delta-Lake/3.2"}
    assert set(refused_by(parse_commit(7, commit(info, ["opt"], ["a", "b"], data_change=True)), known)) == {0, 1}
    assert set(refused_by(parse_commit(7, commit(info, adds=["b"], data_change=True)), known)) == {0}  # an append


def test_lakelog_commits_and_commits_without_files_are_not_checked() -> None:
    ours = {"operation": "DELETE", COMMIT_ID: "c0ffee", "lakelog.job": "retention"}
    assert refused_by(parse_commit(3, commit(ours, removes=["a"], data_change=True)), known) == {}
    vacuum = {"operation": "VACUUM END", "engineInfo": "delta-rs:py-1.6.6"}
    assert refused_by(parse_commit(3, commit(vacuum)), known) == {}


def test_a_file_whose_records_cannot_be_read_refuses_every_partition() -> None:
    refused = refused_by(parse_commit(9, commit(OPTIMIZE, ["gone"], ["a"])), known)
    assert list(refused) == [EVERY_PARTITION]


def test_the_index_checks_find_duplicates_and_records_beyond_the_log_end() -> None:
    assert duplicated([entry("a", 0, 0, 9), entry("b", 0, 10, 19, count=3)]) is None
    assert "both hold offsets from 5 to 9" in duplicated([entry("a", 0, 0, 9), entry("w", 0, 5, 14)])
    assert "holds 3 records at the 2 offsets" in duplicated([entry("w", 0, 0, 1, count=3)])
    assert beyond_log_end([entry("a", 0, 0, 9)], 10) is None
    assert below_log_start([entry("opt", 0, 12, 19)], [entry("a", 0, 10, 19, count=8)]) is None  # a rewrite
    assert below_log_start([entry("a", 0, 10, 19)], []) is None  # the first load
    assert "below the log start offset 10" in below_log_start([entry("w", 0, 5, 9), entry("a", 0, 10, 19)],
                                                              [entry("a", 0, 10, 19)])
    assert "beyond the log end offset 10" in beyond_log_end([entry("a", 0, 0, 9), entry("w", 0, 10, 14)], 10)


def test_a_refused_partition_answers_a_clear_error_mapped_for_http_and_kafka() -> None:
    refusals = Refusals("orders")
    refusals.refuse(2, "WRITE by delta-rs at version 5 changed its records (dataChange=true)")
    refusals.refuse(2, "another reason, later")  # the first reason stays
    assert refusals.error(1) is None
    with pytest.raises(DataChangedOutside) as refused:
        refusals.check(2)
    error = refused.value
    assert (error.topic, error.partition, error.code) == ("orders", 2, "DATA_CHANGED_OUTSIDE_LAKELOG")
    assert "partition 2 of topic 'orders' was changed outside lakelog: WRITE by delta-rs at version 5" in str(error)
    assert status_of(error) == 409 and not error.retriable
    assert error_code(error) == CODES["KAFKA_STORAGE_ERROR"]
    refusals.refuse(EVERY_PARTITION, "a commit changed files that could not be read")
    assert refusals.error(0) is not None


def test_an_append_refusal_is_lifted_by_lakelogs_repair_commit_and_no_other_is() -> None:
    refusals = Refusals("orders")
    refusals.refuse(0, "w holds offsets up to 7, beyond the log end offset 5", repairable=True)
    refusals.refuse(1, "w holds offsets up to 3, beyond the log end offset 2", repairable=True)
    refusals.refuse(1, "a and w both hold offsets from 1 to 1")  # not repairable: it stays
    refusals.refuse(2, "DELETE by delta-rs at version 5 changed its records (dataChange=true)")
    assert "run `lakelog topics repair orders`" in str(refusals.error(0))
    assert "repair the table and restart lakelog" in str(refusals.error(1))
    repair = commit({COMMIT_ID: "x", "lakelog.job": "repair", "lakelog.repairedPartitions": [0, 1, 2]},
                    removes=["w"], data_change=True)
    assert parse_commit(9, repair).repaired == (0, 1, 2)
    assert parse_commit(9, commit({"lakelog.repairedPartitions": [0]}, removes=["w"])).repaired == ()  # not lakelog's
    refusals.lift(parse_commit(9, repair).repaired, "lakelog's repair at version 9")
    assert refusals.error(0) is None
    assert "both hold offsets" in str(refusals.error(1)) and refusals.error(2) is not None
