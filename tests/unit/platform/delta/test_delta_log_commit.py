"""delta_log.encode_commit: an append's commit file, read back by lakelog's parser and by delta-rs."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.transaction import AddAction, Transaction

from lakelog.platform.delta.delta_log import added_actions, commit_info, commit_uri, encode_commit
from lakelog.platform.storage import Storage

ADD = AddAction("partition=3/part-00000-x-c000.snappy.parquet", 1234, {"partition": "3"}, 1_700_000_000_000, True,
                json.dumps({"numRecords": 2, "minValues": {"offset": 10}, "maxValues": {"offset": 11},
                            "nullCount": {"offset": 0}}))


def test_a_commit_holds_commit_info_first_then_adds_then_transactions() -> None:
    commit = encode_commit([ADD], [Transaction("lakelog.partition.3", 12)], {"lakelog.commitId": "c1"}, ["partition"])
    lines = [json.loads(line) for line in commit.splitlines()]
    assert [next(iter(line)) for line in lines] == ["commitInfo", "add", "txn"]
    assert commit_info(commit)["lakelog.commitId"] == "c1"  # custom metadata at the top level, as delta-rs
    assert commit_info(commit)["operation"] == "WRITE"
    (add,) = added_actions(commit)
    assert (add.path, add.size, add.partition_values, add.stats) == (ADD.path, 1234, {"partition": "3"}, ADD.stats)
    assert lines[2]["txn"]["appId"] == "lakelog.partition.3" and lines[2]["txn"]["version"] == 12


def test_delta_rs_reads_the_files_and_transactions_of_an_encoded_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    DeltaTable.create(uri, schema=pa.schema([("partition", pa.int32()), ("offset", pa.int64())]),
                      partition_by=["partition"])
    storage = Storage.open(str(tmp_path))
    assert storage.put_if_absent(commit_uri(uri, 1), encode_commit([ADD], [Transaction("lakelog.partition.3", 12)],
                                                                  {}, ["partition"]))
    assert not storage.put_if_absent(commit_uri(uri, 1), b"{}")  # the version is taken: refused, unchanged
    table = DeltaTable(uri)
    assert table.version() == 1
    assert table.transaction_version("lakelog.partition.3") == 12
    assert pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist() == [ADD.path]
    assert sorted(p.name for p in (tmp_path / "t" / "_delta_log").iterdir()) == [
        "00000000000000000000.json", "00000000000000000001.json"]  # no temporary file left behind
