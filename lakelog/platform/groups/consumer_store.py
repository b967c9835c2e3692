"""KIP-848 consumer groups' state in the control table `<root>/_control/consumer_groups`, so that it survives
its coordinator: a node that takes a group over (or restarts) serves its members where they were, with their
epochs and assignments, and they go on without joining again, as Kafka's coordinator reloads them from
`__consumer_offsets`.

One row per change of a group: its whole state as JSON (`snapshot`), the latest row per group wins, ordered by
`written` (kept strictly increasing by this store). What changes with time alone (heartbeat times, positions)
is not in it; a restored member's session and rebalance timeout start again when it is restored. The pure
parts: `snapshot` (a group's durable state, compared with the last one written to skip a write that changes
nothing) and `restore` (members rebuilt from it). `ConsumerGroupStore` writes rows group-committed on its
own thread (`group_commit.py`), each caller's future answered once durable, and refuses to write once the
node's cluster membership lapsed (as `OffsetStore`).
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

import pyarrow as pa
from deltalake import write_deltalake

from lakelog.platform.clock import now_ms
from lakelog.platform.cluster.errors import NotCoordinator
from lakelog.platform.delta.control_table import latest_rows, open_control_table, read_control_table
from lakelog.platform.errors import StorageUnavailable
from lakelog.platform.groups.membership import CONSUMER, Group, JoinOptions, Member, compile_topic_pattern
from lakelog.platform.layout import CONSUMER_GROUPS_TABLE
from lakelog.platform.produce.group_commit import GroupCommit, fail, succeed
from lakelog.platform.storage import STORAGE_ERRORS, STORAGE_RETRY_PAUSE_S, Storage

log = logging.getLogger(__name__)

CONSUMER_GROUPS_SCHEMA = pa.schema([
    pa.field("group", pa.string(), nullable=False),
    pa.field("state", pa.string(), nullable=False),  # `snapshot`'s JSON
    pa.field("written", pa.int64(), nullable=False),  # milliseconds since the epoch, increasing
])
NO_POLL_RULE_MS = 2**31 - 1  # as consumer_group.py's: KIP-848's clients enforce max.poll.interval.ms


def _tps(partitions: Any) -> list[list[Any]]:
    return sorted([topic, partition] for topic, partition in partitions)


def snapshot(group: Group) -> str:
    """A consumer group's durable state, as JSON (equal text: nothing to write)."""
    members = [{
        "id": m.member_id, "instance": m.options.group_instance_id, "epoch": m.epoch,
        "topics": list(m.options.topics), "pattern": m.options.pattern,
        "session_ms": m.options.session_timeout_ms, "rebalance_ms": m.rebalance_timeout_ms,
        "assignment": _tps(m.assignment), "revoking": _tps(m.revoking), "delivered": _tps(m.delivered),
    } for m in sorted(group.members.values(), key=lambda m: m.member_id)]
    return json.dumps({
        "generation": group.generation, "assignor": group.assignor, "members": members,
        "handoff": sorted([t, p, owner] for (t, p), owner in group.handoff.items()),
        "seen": sorted(group.partitions_seen.items()),
    }, separators=(",", ":"))


def has_members(state: str) -> bool:
    """Whether a state holds members (a group whose members all left holds none: nothing to restore)."""
    return bool(json.loads(state)["members"])


def restore(group: Group, state: str, now: float) -> bool:
    """The members of `state` put back into `group` (its committed offsets kept), their sessions and
    rebalance timeouts starting at `now`; False (nothing changed) when the state has no members."""
    data = json.loads(state)
    if not data["members"]:
        return False
    group.kind, group.generation, group.assignor = CONSUMER, data["generation"], data["assignor"]
    group.members, group.instances, group.assign_at = {}, {}, None
    group.handoff = {(t, p): owner for t, p, owner in data["handoff"]}
    group.partitions_seen = dict((t, n) for t, n in data["seen"])
    for m in data["members"]:
        options = JoinOptions(topics=tuple(m["topics"]), pattern=m["pattern"], session_timeout_ms=m["session_ms"],
                              max_poll_interval_ms=NO_POLL_RULE_MS, group_instance_id=m["instance"],
                              assignor=data["assignor"] or "cooperative-sticky")
        member = Member(m["id"], options, None if m["pattern"] is None else compile_topic_pattern(m["pattern"]),
                        now, now, assignment={(t, p) for t, p in m["assignment"]},
                        revoking={(t, p) for t, p in m["revoking"]}, delivered={(t, p) for t, p in m["delivered"]},
                        epoch=m["epoch"], rebalance_timeout_ms=m["rebalance_ms"])
        if member.revoking:
            member.revoke_deadline = now + member.rebalance_timeout_ms / 1000
        group.members[member.member_id] = member
        if member.options.group_instance_id:
            group.instances[member.options.group_instance_id] = member.member_id
    return True


@dataclass
class _Pending:
    group: str
    state: str
    deadline: float
    future: Future = field(default_factory=Future)


class ConsumerGroupStore:
    """The table's reads (`load`, any thread) and group-committed writes (`submit`, any thread; the rows are
    appended on the store's own thread)."""

    def __init__(self, storage: Storage, linger_ms: int = 2, timeout_ms: int = 30_000,
                 current: Callable[[], bool] = lambda: True) -> None:
        self._storage = storage
        self._current = current
        self._dt = open_control_table(storage, CONSUMER_GROUPS_TABLE, CONSUMER_GROUPS_SCHEMA)
        self._timeout_s = timeout_ms / 1000
        self._last_ms = 0
        self._writes = GroupCommit("consumer-groups-writer", self._write, linger_ms)

    def load(self) -> dict[str, str]:
        """Every group's latest state (storage I/O)."""
        self._dt.update_incremental()
        table = read_control_table(self._storage, self._dt)
        if table.num_rows == 0:
            return {}
        table = latest_rows(table, ["group"], ["written"])
        self._last_ms = max(self._last_ms, max(table.column("written").to_pylist()))
        return dict(zip(table.column("group").to_pylist(), table.column("state").to_pylist()))

    def submit(self, group: str, state: str) -> Future:
        """Queue a group's state; the future answers None once it is durable."""
        pending = _Pending(group, state, time.monotonic() + self._timeout_s)
        self._writes.submit(pending)
        return pending.future

    def in_flight(self, group: str) -> list[Future]:
        """The futures of a group's states submitted but not yet durable (or failed)."""
        return [p.future for p in self._writes.waiting() if p.group == group]

    def close(self) -> None:
        self._writes.close()

    def _write(self, batch: list[_Pending]) -> None:
        if not self._current():
            log.warning("consumer group states of %s not written: this node's cluster membership lapsed",
                        ", ".join(sorted({p.group for p in batch})))
            for pending in batch:
                fail(pending.future, NotCoordinator("this node's cluster membership lapsed: ask the group's "
                                                    "coordinator again"))
            return
        latest = {p.group: p.state for p in batch}  # the last state of a group in the batch wins
        stamp = max(now_ms(), self._last_ms + 1)
        table = pa.Table.from_pydict({"group": list(latest), "state": list(latest.values()),
                                      "written": [stamp] * len(latest)}, schema=CONSUMER_GROUPS_SCHEMA)
        deadline = max(p.deadline for p in batch)
        while True:
            try:
                write_deltalake(self._dt, table, mode="append")
                break
            except STORAGE_ERRORS as exc:
                if time.monotonic() >= deadline:
                    for pending in batch:
                        fail(pending.future, StorageUnavailable(f"could not write consumer group states: {exc}"))
                    return
                time.sleep(STORAGE_RETRY_PAUSE_S)
                try:
                    self._dt.update_incremental()
                except STORAGE_ERRORS:
                    pass
        self._last_ms = stamp
        for pending in batch:
            succeed(pending.future, None)
