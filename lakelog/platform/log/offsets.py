"""Names of a partition's offsets in the log, and its state as the log snapshot (snapshot.py) answers it: the
log end offset is the partition's SetTransaction version (`lakelog.partition.<p>`), other applications'
SetTransactions sit beside it, and a transactional table marks itself (`TRANSACTIONAL_APP_ID`).

The offsets themselves (log start and end, app versions, the index's files) are kept by `LogSnapshot`, with
the snapshot they are read from: each load of the snapshot invalidates them.
"""

from __future__ import annotations

from dataclasses import dataclass

PARTITION_APP_PREFIX = "lakelog.partition."


# Set by every transactional reservation (reservations.py): a table without it has no open transaction, and
# its fetches never ask delta-rs for a partition's `lakelog.open.<p>` (each costs reads of the log).
TRANSACTIONAL_APP_ID = "lakelog.transactional"


def partition_app_id(partition: int) -> str:
    return f"{PARTITION_APP_PREFIX}{partition}"


def open_app_id(partition: int) -> str:
    """The partition's first open transactional offset + 1 (0 or absent: none), see reservations.py."""
    return f"lakelog.open.{partition}"


@dataclass(frozen=True)
class PartitionState:
    partition: int
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    files: int
