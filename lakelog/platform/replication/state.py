"""Replica state per topic (replica list, leader, leader epoch, in-sync set), in a control table.

Every site keeps `_control/replicas`, append-only; the row with the highest
(leader_epoch, updated) wins across the sites that answer, so a state written
while a site was down is still found after it returns.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from lakelog.platform.clock import now_ms
from lakelog.platform.delta.control_table import latest_rows, open_control_table, read_control_table
from lakelog.platform.layout import REPLICAS_TABLE
from lakelog.platform.replication.errors import SiteUnavailable
from lakelog.platform.storage import Storage

log = logging.getLogger(__name__)
REPLICAS_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("replicas", pa.string(), nullable=False),
    pa.field("leader", pa.string(), nullable=False),
    pa.field("leader_epoch", pa.int64(), nullable=False),
    pa.field("isr", pa.string(), nullable=False),
    pa.field("updated_ms", pa.int64(), nullable=False),
])


@dataclass(frozen=True)
class ReplicaState:
    topic: str
    replicas: tuple[str, ...]  # the first is the preferred leader
    leader: str
    leader_epoch: int
    isr: tuple[str, ...]  # includes the leader
    updated_ms: int = 0

    @property
    def followers(self) -> tuple[str, ...]:
        return tuple(r for r in self.replicas if r != self.leader)

    def with_isr(self, isr: list[str] | tuple[str, ...]) -> ReplicaState:
        ordered = tuple(r for r in self.replicas if r in set(isr))
        return replace(self, isr=ordered, updated_ms=now_ms())

    def key(self) -> tuple[int, int]:
        return self.leader_epoch, self.updated_ms



class ReplicaStateStore:
    def __init__(self, sites: dict[str, Storage]) -> None:
        self.sites = sites
        self._tables: dict[str, DeltaTable] = {}
        self._cache: dict[str, ReplicaState] = {}
        self._lock = threading.Lock()

    def _table(self, site: str) -> DeltaTable:
        table = self._tables.get(site)
        if table is None:
            table = self._tables[site] = open_control_table(self.sites[site], REPLICAS_TABLE, REPLICAS_SCHEMA)
        return table

    def save(self, state: ReplicaState) -> list[str]:
        """Append the state at every reachable site; the sites written are returned."""
        row = pa.Table.from_pylist([{
            "topic": state.topic, "replicas": json.dumps(list(state.replicas)), "leader": state.leader,
            "leader_epoch": state.leader_epoch, "isr": json.dumps(list(state.isr)), "updated_ms": state.updated_ms,
        }], schema=REPLICAS_SCHEMA)
        written = []
        for site in self.sites:
            try:
                with self._lock:
                    write_deltalake(self._table(site), row, mode="append")
                written.append(site)
            except Exception as exc:  # an unreachable site: it reads the newer state when it returns
                log.warning("replica state for %s not written to site %s: %s", state.topic, site, exc)
                self._tables.pop(site, None)
        if not written:
            raise SiteUnavailable(f"no site reachable to record the replica state of {state.topic!r}")
        with self._lock:
            self._cache[state.topic] = state
        return written

    def load(self, topic: str, refresh: bool = False) -> ReplicaState | None:
        with self._lock:
            if not refresh and topic in self._cache:
                return self._cache[topic]
        best: ReplicaState | None = None
        for site in self.sites:
            try:
                with self._lock:
                    table = self._table(site)
                    table.update_incremental()
                    rows = read_control_table(self.sites[site], table) if table.version() > 0 else None
            except Exception:
                self._tables.pop(site, None)
                continue
            for state in _states(rows, topic):
                if best is None or state.key() > best.key():
                    best = state
        if best is not None:
            with self._lock:
                self._cache[topic] = best
        return best


def _states(rows: pa.Table | None, topic: str) -> list[ReplicaState]:
    """The site's latest state of `topic` (the highest leader epoch, then the newest), as a list of 0 or 1."""
    if rows is None:
        return []
    mine = rows.filter(pc.equal(rows.column("topic"), topic))
    return [
        ReplicaState(row["topic"], tuple(json.loads(row["replicas"])), row["leader"], row["leader_epoch"],
                     tuple(json.loads(row["isr"])), row["updated_ms"])
        for row in latest_rows(mine, ["topic"], ["leader_epoch", "updated_ms"]).to_pylist()
    ]
