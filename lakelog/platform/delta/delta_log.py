"""The Delta commit log as files: names, versions, and the actions inside a commit file.

The topic log writes its appends' commit files itself (`encode_commit`: appended
files and SetTransactions, as delta-rs writes them), follows other writers'
appends commit by commit (`appended`), reads its own back to tell whether an
ambiguous commit landed, and cleans old ones; the replication
copier copies them byte for byte; all through these helpers.
"""

from __future__ import annotations

import json
import re
import uuid
from urllib.parse import unquote

import orjson
from deltalake.transaction import AddAction, Transaction

from lakelog.platform.clock import now_ms
from lakelog.platform.storage import Storage

DELTA_LOG = "_delta_log"
COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
LAST_CHECKPOINT = "_last_checkpoint"
ENGINE = "lakelog"


def commit_name(version: int) -> str:
    return f"{version:020d}.json"


def checkpoint_name(version: int) -> str:
    return f"{version:020d}.checkpoint.parquet"


def commit_uri(table_uri: str, version: int) -> str:
    return f"{table_uri}/{DELTA_LOG}/{commit_name(version)}"


def file_version(name: str) -> int | None:
    """The version of a commit or checkpoint file name; None for anything else."""
    match = COMMIT_FILE.match(name) or CHECKPOINT_FILE.match(name)
    return int(match.group(1)) if match else None


def versions(storage: Storage, table_uri: str) -> list[int]:
    """The versions whose commit files are present (lists the log folder)."""
    found = []
    for name in storage.list_names(f"{table_uri}/{DELTA_LOG}"):
        match = COMMIT_FILE.match(name)
        if match:
            found.append(int(match.group(1)))
    return sorted(found)


def latest_version(storage: Storage, table_uri: str) -> int:
    found = versions(storage, table_uri)
    return found[-1] if found else -1


def _actions(commit: bytes) -> list[dict]:
    return [orjson.loads(line) for line in commit.splitlines() if line.strip()]


def added_actions(commit: bytes) -> list[AddAction]:
    actions = []
    for entry in _actions(commit):
        if "add" in entry:
            add = entry["add"]
            actions.append(AddAction(unquote(add["path"]), add["size"], add["partitionValues"],
                                     add["modificationTime"], add.get("dataChange", True), add.get("stats") or "{}"))
    return actions


def add_entry(a: AddAction) -> dict:
    """An add action as delta-rs writes it in a commit file."""
    return {"path": a.path, "partitionValues": a.partition_values, "size": a.size,
            "modificationTime": a.modification_time, "dataChange": a.data_change, "stats": a.stats}


def encode_commit(adds: list[AddAction], txns: list[Transaction], metadata: dict,
                  partition_by: list[str] | None) -> bytes:
    """The commit file of an append: commitInfo (with `metadata` at its top level, as delta-rs puts custom
    metadata), one add per file and one txn per SetTransaction, a JSON object per line."""
    now = now_ms()
    info = {"timestamp": now, "operation": "WRITE",
            "operationParameters": {"mode": "Append", "partitionBy": json.dumps(partition_by or [])},
            "engineInfo": ENGINE, "isBlindAppend": True, **metadata}
    lines = [{"commitInfo": info}]
    lines += [{"add": add_entry(a)} for a in adds]
    lines += [{"txn": {"appId": t.app_id, "version": t.version, "lastUpdated": now}} for t in txns]
    return b"\n".join(orjson.dumps(line) for line in lines)


def encode_create(name: str, schema_json: str, partition_by: list[str], configuration: dict[str, str]) -> bytes:
    """Version 0 of a new table, as delta-rs's `DeltaTable.create` writes it (protocol 1/2: the topic schema
    needs no table features). Written with one put-if-absent, without the listing and the snapshot loads
    around delta-rs's create (about 20 requests on S3)."""
    now = now_ms()
    metadata = {"id": str(uuid.uuid4()), "name": name, "description": None,
                "format": {"provider": "parquet", "options": {}}, "schemaString": schema_json,
                "partitionColumns": partition_by, "createdTime": now, "configuration": configuration}
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    info = {"timestamp": now, "operation": "CREATE TABLE", "engineInfo": ENGINE,
            "operationParameters": {"metadata": json.dumps(metadata), "protocol": json.dumps(protocol),
                                    "mode": "ErrorIfExists"}}
    lines = [{"commitInfo": info}, {"protocol": protocol}, {"metaData": metadata}]
    return b"\n".join(orjson.dumps(line) for line in lines)


APPEND_ACTIONS = frozenset({"commitInfo", "add", "txn"})


def appended(commit: bytes) -> tuple[list[AddAction], list[Transaction]] | None:
    """The files and SetTransactions of a commit that only appends (what lakelog's produce writes); None
    for any other commit (removes, metadata or protocol changes), which a reader loads through delta-rs."""
    entries = _actions(commit)
    if any(not APPEND_ACTIONS.issuperset(entry) for entry in entries):
        return None
    txns = [Transaction(e["txn"]["appId"], int(e["txn"]["version"])) for e in entries if "txn" in e]
    return added_actions(commit), txns


def added_paths(commit: bytes) -> list[str]:
    return [action.path for action in added_actions(commit)]


def removed_paths(commit: bytes) -> dict[str, int]:
    """The files a commit removes, with their deletion timestamps (ms)."""
    return {unquote(entry["remove"]["path"]): int(entry["remove"].get("deletionTimestamp") or 0)
            for entry in _actions(commit) if "remove" in entry}


# commitInfo: every commit lakelog makes (appends, maintenance jobs) names itself by an id; a commit without
# one is another writer's (outside_commits.py).
COMMIT_ID = "lakelog.commitId"
PRODUCER_IDS = "lakelog.producerIds"  # commitInfo: the idempotent producer ids an append wrote


def committed_producers(commit: bytes) -> set[int] | None:
    """The idempotent producer ids a commit wrote batches of; None when it cannot tell (an append written
    without the list, by another engine or an older lakelog), so the caller must assume any producer."""
    info, appends = None, False
    for entry in _actions(commit):
        if "commitInfo" in entry:
            info = entry["commitInfo"]
        elif "add" in entry and entry["add"].get("dataChange", True):
            appends = True
    if info is not None and isinstance(info.get(PRODUCER_IDS), list):
        return {int(pid) for pid in info[PRODUCER_IDS]}
    return None if appends else set()  # removes and rewrites (retention, compaction) add no new batches


def commit_info(commit: bytes) -> dict:
    for entry in _actions(commit):
        if "commitInfo" in entry:
            return entry["commitInfo"]
    return {}


def clean_commit_log(storage: Storage, table_uri: str, cutoff: int, checkpoint_interval: int,
                     cleaned_below: int | None) -> int | None:
    """Delete commit and checkpoint files below version `cutoff`; answers the new `cleaned_below`.

    Refreshing a snapshot lists the whole `_delta_log` folder on a local root, so its size, not
    its age, is what matters: a count of versions kept, not Delta's time-based retention. Older
    commits are only needed by followers that fell that far behind, which then start from a
    checkpoint. `cleaned_below` None (first time in this process) sweeps what earlier runs left;
    otherwise only the versions since the last cleanup are named, with no listing.
    """
    if cutoff <= 0:
        return cleaned_below
    log_dir = f"{table_uri}/{DELTA_LOG}"
    if cleaned_below is None:
        names = storage.list_names(log_dir)
    else:
        names = [commit_name(v) for v in range(cleaned_below, cutoff)]
        names += [checkpoint_name(v) for v in range(cleaned_below, cutoff) if v % checkpoint_interval == 0]
    storage.delete_files([f"{log_dir}/{n}" for n in names if (v := file_version(n)) is not None and v < cutoff])
    return cutoff
