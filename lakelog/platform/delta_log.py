"""The Delta commit log as files: names, versions, and the actions inside a commit file.

The topic log reads its own commits back (to index the files it just added,
or to tell whether an ambiguous commit landed), cleans old ones, and the
replication copier copies them byte for byte; all through these helpers.
"""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

from deltalake.transaction import AddAction

from lakelog.platform.storage import Storage

DELTA_LOG = "_delta_log"
COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
LAST_CHECKPOINT = "_last_checkpoint"


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
    return [json.loads(line) for line in commit.splitlines() if line.strip()]


def added_actions(commit: bytes) -> list[AddAction]:
    actions = []
    for entry in _actions(commit):
        if "add" in entry:
            add = entry["add"]
            actions.append(AddAction(unquote(add["path"]), add["size"], add["partitionValues"],
                                     add["modificationTime"], add.get("dataChange", True), add.get("stats") or "{}"))
    return actions


def added_paths(commit: bytes) -> list[str]:
    return [action.path for action in added_actions(commit)]


def commit_info(commit: bytes) -> dict:
    for entry in _actions(commit):
        if "commitInfo" in entry:
            return entry["commitInfo"]
    return {}
