"""Another Delta tool writing a topic table: delta-rs in another Python process, as any other tool would be."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from tests.patience import STUCK_S
from tests.together import CLEAN_EXIT

REPO = Path(__file__).resolve().parents[1]
# The table's URI and storage options come in argv (`uri`, `options`); `dt` is its DeltaTable, `rows(partition,
# offsets)` builds records in the topic's schema, and `retried(operation)` runs an operation again when a live
# topic's appends won (`operation` must look `dt` up when called: it is a new DeltaTable then).
PRELUDE = """
import json, sys, time
import pyarrow as pa
from datetime import datetime, timezone
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError
from lakelog.schemas import TOPIC_SCHEMA
uri, options = sys.argv[1], json.loads(sys.argv[2]) or None
dt = DeltaTable(uri, storage_options=options)

def retried(operation):
    # A live topic commits many times a second: delta-rs's 15 commit attempts may all lose to its appends
    # (on S3, where each takes a few round trips, on a busy machine), and a long one may find the commits
    # after its read version cleaned up (lakelog keeps the last 100). Run again on a new snapshot, as anyone
    # would.
    global dt
    deadline = time.monotonic() + STUCK_S  # a loaded machine makes every attempt slow: give up only when stuck
    while True:
        try:
            return operation()
        except (CommitFailedError, DeltaError) as exc:
            if time.monotonic() > deadline or not (isinstance(exc, CommitFailedError)
                                                   or "Invalid table version" in str(exc)):
                raise
            dt = DeltaTable(uri, storage_options=options)

def rows(partition, offsets, value=b"from outside"):
    n = len(offsets)
    return pa.Table.from_pydict({
        "partition": [partition] * n, "offset": list(offsets), "timestamp": [datetime.now(timezone.utc)] * n,
        "timestamp_type": [0] * n, "key": [b"outside"] * n, "value": [value] * n, "headers": [[]] * n,
        "producer_id": [None] * n, "producer_epoch": [None] * n, "sequence": [None] * n}, schema=TOPIC_SCHEMA)
"""


def run_delta_rs(table_uri: str, storage_options: Mapping[str, str] | None, code: str) -> str:
    """Run `code` (after PRELUDE) in another process; its standard output."""
    prelude = PRELUDE.replace("STUCK_S", repr(STUCK_S))
    result = subprocess.run([sys.executable, "-c", prelude + code + CLEAN_EXIT, table_uri, json.dumps(dict(storage_options or {}))],
                            cwd=REPO, capture_output=True, text=True, timeout=2 * STUCK_S)  # past retried's deadline
    assert result.returncode == 0, result.stderr
    return result.stdout
