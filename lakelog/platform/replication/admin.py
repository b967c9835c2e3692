"""Replication admin of a node: a catch-up round over topics and control tables, and the report of where
each follower stands."""

from __future__ import annotations

import logging
from typing import Sequence

from lakelog.platform.log import TopicLog
from lakelog.platform.replication.copier import CopyReport
from lakelog.platform.replication.manager import REPLICATION_FAILURES, ReplicaManager

log = logging.getLogger(__name__)


def sync_all(replicas: ReplicaManager, topics: Sequence[str], control_site: str) -> list[CopyReport]:
    """One catch-up round: every follower of every topic, then the control tables."""
    reports: list[CopyReport] = []
    for name in topics:
        try:
            reports += replicas.sync(name)
        except REPLICATION_FAILURES as exc:
            log.warning("replication of %s skipped: %s", name, exc)
    reports += replicas.sync_control_tables(control_site)
    return reports


def report(replicas: ReplicaManager, topic: str, partitions: int, leader_log: TopicLog) -> dict:
    """Leader, in-sync set and the lag of each follower, per site and per partition."""
    state = replicas.require_state(topic, refresh=True)
    followers = []
    for lag in replicas.lag(topic):
        entry: dict = {"site": lag.site, "in_sync": lag.in_sync, "versions_behind": lag.versions_behind}
        try:
            replica = TopicLog(replicas.sites[lag.site], topic)
            entry["partitions"] = [
                {"partition": p, "log_end_offset": replica.log_end_offset(p),
                 "lag": leader_log.log_end_offset(p) - replica.log_end_offset(p)}
                for p in range(partitions)]
        except REPLICATION_FAILURES as exc:
            entry["error"] = str(exc)
        followers.append(entry)
    return {"topic": topic, "replicas": list(state.replicas), "leader": state.leader,
            "leader_epoch": state.leader_epoch, "isr": list(state.isr), "followers": followers}
