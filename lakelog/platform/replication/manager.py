"""The replica manager: replica placement, the in-sync set, acks=all, catch-up, election, truncation.

Kafka's replication model applied to Delta commits. The leader site takes the
commits; followers receive the same commits, version for version (copier.py).
A follower is in sync while its lag stays below `replica.lag.time.max.ms`; a
follower that fails a copy leaves the in-sync set before any acks=all answer,
so every acknowledged commit is on every remaining in-sync replica and a clean
election loses nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from lakelog.platform.clock import now_ms
from lakelog.platform.errors import InvalidRequest, LakelogError, NotEnoughReplicas
from lakelog.platform.layout import REPLICATED_CONTROL_TABLES, topic_path
from lakelog.platform.partitioner import murmur2
from lakelog.platform.replication.copier import CopyReport, FileCopier, TableReplicator
from lakelog.platform.replication.errors import (
    ElectionNotAllowed,
    FencedLeaderEpoch,
    ReplicaDiverged,
    SiteUnavailable,
)
from lakelog.platform.replication.state import ReplicaState, ReplicaStateStore
from lakelog.platform.storage import STORAGE_ERRORS, Storage

log = logging.getLogger(__name__)
# A follower or site that fails with these leaves the in-sync set; anything else is a bug and surfaces.
REPLICATION_FAILURES = (*STORAGE_ERRORS, LakelogError)


@dataclass(frozen=True)
class Election:
    state: ReplicaState
    previous: ReplicaState
    warning: str = ""


@dataclass(frozen=True)
class FollowerLag:
    topic: str
    site: str
    leader_version: int
    follower_version: int
    in_sync: bool

    @property
    def versions_behind(self) -> int:
        return max(self.leader_version - self.follower_version, 0)


class ReplicaManager:
    def __init__(self, sites: dict[str, Storage], lag_time_max_ms: int = 30_000) -> None:
        if not sites:
            raise InvalidRequest("replication needs at least one site")
        self.sites = sites
        self.store = ReplicaStateStore(sites)
        self.lag_time_max_s = lag_time_max_ms / 1000
        self._caught_up: dict[tuple[str, str], float] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, topic: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(topic, threading.Lock())

    # ---- placement ----------------------------------------------------------

    def assign(self, topic: str, replication_factor: int, sites: Sequence[str] | None = None) -> ReplicaState:
        names = list(self.sites)
        if replication_factor > len(names):
            raise InvalidRequest(
                f"replication.factor {replication_factor} is larger than the {len(names)} configured sites"
            )
        if sites:
            unknown = [s for s in sites if s not in self.sites]
            if unknown or len(set(sites)) != len(sites) or len(sites) != replication_factor:
                raise InvalidRequest(
                    f"replica sites {list(sites)} must be {replication_factor} distinct sites of {names}"
                )
            replicas = tuple(sites)
        else:
            start = (murmur2(topic.encode()) & 0x7FFFFFFF) % len(names)  # spread preferred leaders over sites
            replicas = tuple((names[(start + i) % len(names)]) for i in range(replication_factor))
        return ReplicaState(topic, replicas, replicas[0], 0, replicas, now_ms())

    def create(self, state: ReplicaState, create_table: Callable[[Any], None]) -> None:
        """Create the table at the leader, copy it to the followers, record the state."""
        create_table(self.sites[state.leader])
        for follower in state.followers:
            self.replicator(state, follower).catch_up()
        self.store.save(state)

    def state(self, topic: str, refresh: bool = False) -> ReplicaState | None:
        return self.store.load(topic, refresh)

    def require_state(self, topic: str, refresh: bool = False) -> ReplicaState:
        state = self.state(topic, refresh)
        if state is None:
            raise InvalidRequest(f"topic {topic!r} has no replica state")
        return state

    def replicator(self, state: ReplicaState, follower: str, copier: FileCopier | None = None) -> TableReplicator:
        return TableReplicator(self.sites[state.leader], self.sites[follower], topic_path(state.topic), copier)

    # ---- the write path -------------------------------------------------------

    def ensure_in_sync(self, topic: str, min_insync: int) -> ReplicaState:
        """Before an acks=all write: refuse it, writing nothing, when too few replicas are in sync."""
        state = self.require_state(topic)
        if len(state.isr) < min_insync:
            raise NotEnoughReplicas(
                f"topic {topic!r} has {len(state.isr)} in-sync replicas ({', '.join(state.isr)}); "
                f"min.insync.replicas is {min_insync}"
            )
        return state

    def replicate(self, topic: str, version: int, min_insync: int, leader_epoch: int) -> tuple[str, ...]:
        """Copy commits up to `version` to every in-sync follower; the sites that hold it are returned.

        A follower that fails leaves the in-sync set (recorded before we answer).
        """
        with self._lock(topic):
            state = self.require_state(topic)
            if state.leader_epoch != leader_epoch:
                raise FencedLeaderEpoch(
                    f"leader epoch {leader_epoch} of {topic!r} is stale; the current epoch is {state.leader_epoch}"
                )
            self._require_leader(state)
            holders, failed = [state.leader], []
            for follower in state.isr:
                if follower == state.leader:
                    continue
                try:
                    self.replicator(state, follower).catch_up(up_to=version)
                    self._caught_up[(topic, follower)] = time.monotonic()
                    holders.append(follower)
                except REPLICATION_FAILURES as exc:
                    self._require_leader(state)  # a lost leader is not the follower's fault
                    log.warning("follower %s of %s left the in-sync set: %s", follower, topic, exc)
                    failed.append(follower)
            if failed:
                self.store.save(state.with_isr([s for s in state.isr if s not in failed]))
        if len(holders) < min_insync:
            raise NotEnoughReplicas(
                f"commit {version} of {topic!r} is on {len(holders)} sites ({', '.join(holders)}); "
                f"min.insync.replicas is {min_insync}"
            )
        return tuple(holders)

    def _require_leader(self, state: ReplicaState) -> int:
        try:
            return TableReplicator(self.sites[state.leader], self.sites[state.leader],
                                   topic_path(state.topic)).source_version()
        except REPLICATION_FAILURES as exc:
            raise SiteUnavailable(f"leader site {state.leader!r} of {state.topic!r} is unreachable: {exc}") from None

    # ---- catch-up (the replication job and the embedded schedule) --------------

    def sync(self, topic: str, copier_for: Callable[[ReplicaState, str], Any] | None = None) -> list[CopyReport]:
        """Bring every reachable follower up to the leader; grow and shrink the in-sync set."""
        reports = []
        with self._lock(topic):
            state = self.require_state(topic, refresh=True)
            leader_version = self._require_leader(state)
            isr = set(state.isr)
            for follower in state.followers:
                copier = copier_for(state, follower) if copier_for else None
                replicator = self.replicator(state, follower, copier)
                try:
                    if replicator.target_version() >= 0 and replicator.diverged():
                        common = replicator.last_common_version()
                        removed = replicator.truncate_after(common)
                        log.warning("truncated %s at %s after version %d: %s", topic, follower, common, removed)
                    reports.append(replicator.catch_up(up_to=leader_version))
                    self._caught_up[(topic, follower)] = time.monotonic()
                    isr.add(follower)
                except REPLICATION_FAILURES as exc:
                    self._require_leader(state)
                    log.warning("follower %s of %s could not catch up: %s", follower, topic, exc)
                    since = self._caught_up.get((topic, follower), 0.0)
                    if time.monotonic() - since > self.lag_time_max_s or isinstance(exc, ReplicaDiverged):
                        isr.discard(follower)
            if isr != set(state.isr):
                self.store.save(state.with_isr(sorted(isr)))
        return reports

    def lag(self, topic: str) -> list[FollowerLag]:
        state = self.require_state(topic, refresh=True)
        leader_version = TableReplicator(self.sites[state.leader], self.sites[state.leader],
                                         topic_path(topic)).source_version()
        lags = []
        for follower in state.followers:
            try:
                version = self.replicator(state, follower).target_version()
            except REPLICATION_FAILURES:
                version = -1
            lags.append(FollowerLag(topic, follower, leader_version, version, follower in state.isr))
        return lags

    def sync_control_tables(self, control_site: str) -> list[CopyReport]:
        reports = []
        for site, storage in self.sites.items():
            if site == control_site:
                continue
            for table in REPLICATED_CONTROL_TABLES:
                replicator = TableReplicator(self.sites[control_site], storage, table)
                try:
                    if replicator.source_version() < 0:
                        continue
                    if replicator.target_version() >= 0 and replicator.diverged():
                        replicator.truncate_after(replicator.last_common_version())
                    reports.append(replicator.catch_up())
                except REPLICATION_FAILURES as exc:
                    log.warning("control table %s not replicated to %s: %s", table, site, exc)
        return reports

    # ---- election ---------------------------------------------------------------

    def elect(self, topic: str, site: str | None = None, unclean: bool = False,
              check: Callable[[str], None] | None = None) -> Election:
        """Clean election: only an in-sync follower becomes leader, unless `unclean` is given. `check` is
        given the site chosen before anything is recorded, and may refuse it by raising."""
        with self._lock(topic):
            state = self.require_state(topic, refresh=True)
            if site is not None and site not in state.replicas:
                raise ElectionNotAllowed(f"site {site!r} holds no replica of {topic!r} ({', '.join(state.replicas)})")
            candidates = [s for s in state.replicas if s != state.leader and (s in state.isr or unclean)]
            if site is not None:
                if site == state.leader:
                    return Election(state, state, f"{site} already leads {topic}")
                if site not in candidates:
                    raise ElectionNotAllowed(
                        f"site {site!r} is not in sync for {topic!r} (in sync: {', '.join(state.isr)}); "
                        f"pass --unclean to promote it anyway, losing the commits it lacks"
                    )
                chosen = site
            elif candidates:
                chosen = candidates[0]
            else:
                raise ElectionNotAllowed(
                    f"no in-sync follower of {topic!r} (in sync: {', '.join(state.isr)}); pass --unclean to "
                    f"promote an out-of-sync one"
                )
            if check is not None:
                check(chosen)
            warning = ""
            isr = [s for s in state.isr if s != state.leader]
            if chosen not in state.isr:
                warning = self._loss_warning(state, chosen)
                isr = [chosen]
            new = replace(state, leader=chosen, leader_epoch=state.leader_epoch + 1,
                          isr=tuple(r for r in state.replicas if r in set(isr) | {chosen}),
                          updated_ms=now_ms())
            self.store.save(new)
            return Election(new, state, warning)

    def _loss_warning(self, state: ReplicaState, chosen: str) -> str:
        try:
            lead = TableReplicator(self.sites[state.leader], self.sites[chosen], topic_path(state.topic))
            have, had = lead.target_version(), lead.source_version()
            detail = f"it holds version {have} of the log; the old leader had {had}"
        except REPLICATION_FAILURES:
            detail = "the old leader cannot be reached to tell how far it was ahead"
        return (f"unclean election: {chosen} was not in sync for {state.topic}; {detail}. Commits it lacks are "
                f"lost, and replicas holding them are truncated when they return.")
