"""The maintenance jobs' commits as Delta tools read them (file_changes.py): a roll is an OPTIMIZE whose add
and remove actions all say dataChange=false (Spark's Delta stream skips it), retention and compaction are a
DELETE with dataChange=true; the _delta_log JSON, delta-rs's history() and DuckDB all agree."""

from __future__ import annotations

import json
from pathlib import Path

from deltalake import DeltaTable

from delta_readers import assert_duckdb_agrees
from lakelog.platform import Broker, Record
from lakelog.platform.delta.delta_log import commit_uri
from lakelog.settings import Settings
from lakelog.spark_jobs.jobs import run_job
from log_check import assert_topic_intact

PARTITIONS = 2


def produce(broker: Broker, topic: str, flushes: int, tag: str, keys: int = 1000) -> dict[tuple[int, int], bytes]:
    acked = {}
    for f in range(flushes):
        records = [Record(f"{tag}-{f}-{p}".encode(), key=f"k{f % keys}".encode(), partition=p)
                   for p in range(PARTITIONS)]
        result = broker.produce(topic, records)
        acked.update({(p, o): r.value for r, (p, o, _) in zip(records, result.records())})
    return acked


def commit(broker: Broker, topic: str, version: int) -> tuple[dict, list[dict]]:
    """The commitInfo and the file actions (adds and removes) of one commit file."""
    topic_log = broker.topic_log(topic)
    lines = [json.loads(line) for line in topic_log.storage.read_bytes(commit_uri(topic_log.uri, version)).splitlines()]
    info = next(line["commitInfo"] for line in lines if "commitInfo" in line)
    return info, [line for line in lines if "add" in line or "remove" in line]


def test_a_roll_is_an_optimize_and_retention_a_delete(tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    with Broker(Settings(root=root, linger_ms=0)) as broker:
        broker.create_topic("t", PARTITIONS, {"retention.bytes": "0"})
        acked = produce(broker, "t", 4, "a")
        run_job("roll", broker)
        roll = broker.topic_log("t").version
        acked |= produce(broker, "t", 3, "b")
        run_job("roll", broker)  # the first roll's files are now closed segments
        assert run_job("retention", broker).commits == PARTITIONS  # one commit per partition
        last = broker.topic_log("t").version

        info, actions = commit(broker, "t", roll)
        assert info["operation"] == "OPTIMIZE" and info["lakelog.job"] == "roll"
        assert {kind for a in actions for kind in a} == {"add", "remove"}
        assert all(a[kind]["dataChange"] is False for a in actions for kind in a)
        for version in (last - 1, last):
            info, actions = commit(broker, "t", version)
            assert info["operation"] == "DELETE" and info["lakelog.job"] == "retention"
            assert [a["remove"]["dataChange"] for a in actions] == [True]
            (predicate,) = json.loads(info["operationParameters"]["predicate"])
            assert predicate.endswith("AND offset BETWEEN 0 AND 3")  # the first roll's four records
            assert info["operationMetrics"]["numDeletedRows"] == "4"

        topic_log = broker.topic_log("t")
        history = DeltaTable(topic_log.uri).history()  # newest first
        assert [h["operation"] for h in history[:4]] == ["DELETE", "DELETE", "OPTIMIZE", "WRITE"]
        assert history[2]["operationParameters"]["zOrderBy"] == "[]"
        assert "CREATE TABLE" == history[-1]["operation"]
    offsets = assert_topic_intact(root, "t", allow_gaps=False)
    assert all(stored[0] == 4 for stored in offsets.values())  # retention moved the log start
    assert_duckdb_agrees(root, "t", acked={k: v for k, v in acked.items() if k[1] >= 4})


def test_compaction_is_a_delete_that_keeps_the_latest_record_per_key(tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    with Broker(Settings(root=root, linger_ms=0)) as broker:
        broker.create_topic("c", PARTITIONS, {"cleanup.policy": "compact"})
        acked = produce(broker, "c", 6, "a", keys=2)
        run_job("roll", broker)
        acked |= produce(broker, "c", 1, "b", keys=2)
        run_job("roll", broker)  # the first roll's files are closed: compaction cleans them
        assert run_job("compact", broker).commits == PARTITIONS
        info, actions = commit(broker, "c", broker.topic_log("c").version)
        assert info["operation"] == "DELETE" and info["lakelog.job"] == "compact"
        assert {kind for a in actions for kind in a} == {"add", "remove"}
        assert all(a[kind]["dataChange"] is True for a in actions for kind in a)
        assert info["operationMetrics"]["numDeletedRows"] == "4"  # of six records, the latest of two keys stay
    rows = assert_duckdb_agrees(root, "c")
    kept = {(p, o) for p, o, _, _ in rows}
    assert kept == {(p, o) for p in range(PARTITIONS) for o in (4, 5, 6)}
    assert_duckdb_agrees(root, "c", acked={k: v for k, v in acked.items() if k in kept})
