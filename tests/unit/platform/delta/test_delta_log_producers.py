"""delta_log.committed_producers: which idempotent producers a commit of another writer wrote."""

from __future__ import annotations

import json

from deltalake.transaction import AddAction, Transaction

from lakelog.platform.delta.delta_log import PRODUCER_IDS, committed_producers, encode_commit

ADD = AddAction("partition=0/part-0.parquet", 10, {"partition": "0"}, 1, True, "{}")


def test_an_append_names_its_producers() -> None:
    commit = encode_commit([ADD], [Transaction("lakelog.partition.0", 3)], {PRODUCER_IDS: [7, 1 << 62]}, ["partition"])
    assert committed_producers(commit) == {7, 1 << 62}


def test_an_append_without_idempotent_producers_names_none() -> None:
    assert committed_producers(encode_commit([ADD], [], {PRODUCER_IDS: []}, ["partition"])) == set()


def test_an_append_without_the_list_may_hold_any_producer() -> None:
    assert committed_producers(encode_commit([ADD], [], {"lakelog.commitId": "c"}, ["partition"])) is None


def test_removes_and_rewrites_add_no_batches() -> None:
    rewrite = b"\n".join(json.dumps(line).encode() for line in [
        {"commitInfo": {"operation": "OPTIMIZE"}},
        {"add": {"path": "p", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": False}},
        {"remove": {"path": "q", "deletionTimestamp": 1, "dataChange": False}},
    ])
    assert committed_producers(rewrite) == set()
