"""A new table's version 0 written by lakelog (one put-if-absent) is what delta-rs's create writes, and its
first checkpoint is one delta-rs reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakelog.platform.delta.checkpoint import first_checkpoint
from lakelog.platform.delta.delta_log import checkpoint_name, commit_name, encode_create
from lakelog.platform.errors import TopicAlreadyExists
from lakelog.platform.log import TopicLog
from lakelog.platform.log.topic_log import TOPIC_SCHEMA_JSON
from lakelog.platform.segments.segment import TableLayout
from lakelog.platform.storage import Storage
from lakelog.schemas import TOPIC_SCHEMA

PROPERTIES = {"delta.checkpointInterval": "25", "delta.logRetentionDuration": "interval 30 seconds"}


def _actions(path: Path) -> dict[str, dict]:
    return {next(iter(entry)): next(iter(entry.values()))
            for entry in map(json.loads, path.read_text().splitlines())}


@pytest.mark.parametrize("layout", list(TableLayout))
def test_version_0_has_delta_rs_protocol_and_metadata(tmp_path: Path, layout: TableLayout) -> None:
    DeltaTable.create(str(tmp_path / "theirs"), schema=TOPIC_SCHEMA, partition_by=layout.partition_by,
                      configuration=PROPERTIES, name="t")
    theirs = _actions(tmp_path / "theirs" / "_delta_log" / commit_name(0))
    (tmp_path / "ours" / "_delta_log").mkdir(parents=True)
    ours_path = tmp_path / "ours" / "_delta_log" / commit_name(0)
    ours_path.write_bytes(encode_create("t", TOPIC_SCHEMA_JSON, layout.partition_by or [], PROPERTIES))
    ours = _actions(ours_path)
    assert ours["protocol"] == theirs["protocol"]
    volatile = ("id", "createdTime")
    assert {k: v for k, v in ours["metaData"].items() if k not in volatile} == \
        {k: v for k, v in theirs["metaData"].items() if k not in volatile}
    table = DeltaTable(str(tmp_path / "ours"))
    assert table.version() == 0
    assert table.schema().to_arrow() == DeltaTable(str(tmp_path / "theirs")).schema().to_arrow()
    assert table.metadata().partition_columns == (layout.partition_by or [])


def test_the_first_checkpoint_is_of_the_same_table(tmp_path: Path) -> None:
    version_0 = encode_create("t", TOPIC_SCHEMA_JSON, [], PROPERTIES)
    log = tmp_path / "t" / "_delta_log"
    log.mkdir(parents=True)
    (log / commit_name(0)).write_bytes(version_0)
    (log / checkpoint_name(0)).write_bytes(first_checkpoint(version_0))
    (log / commit_name(0)).unlink()  # read from the checkpoint alone, as after a log cleanup
    table = DeltaTable(str(tmp_path / "t"))
    assert table.version() == 0
    assert table.metadata().id == json.loads(version_0.splitlines()[2])["metaData"]["id"]


def test_create_table_refuses_a_former_tables_leftovers(tmp_path: Path) -> None:
    """A cleaned log has no version 0: the put-if-absent of a new one lands, and is taken back."""
    storage = Storage.open(str(tmp_path))
    TopicLog.create_table(storage, "t")
    log = tmp_path / "topics" / "t" / "_delta_log"
    (log / commit_name(0)).rename(log / commit_name(7))  # a former table whose log was cleaned
    (log / checkpoint_name(0)).unlink()
    with pytest.raises(TopicAlreadyExists, match="marked for deletion"):
        TopicLog.create_table(storage, "t")
    assert sorted(p.name for p in log.iterdir()) == [commit_name(7)]


def test_create_table_reuses_an_empty_table(tmp_path: Path) -> None:
    storage = Storage.open(str(tmp_path))
    TopicLog.create_table(storage, "t")
    assert TopicLog.create_version_0(storage, "t") is None  # another creator's bare version 0: reused
    assert DeltaTable(str(tmp_path / "topics" / "t")).version() == 0
