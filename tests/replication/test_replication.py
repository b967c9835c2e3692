"""Replicated commits across three sites: acks=all, in-sync set, clean election, truncation, catch-up."""

from __future__ import annotations

import threading
import time

import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.delta.delta_log import added_paths, commit_uri, versions
from lakelog.platform.errors import LakelogError, NotEnoughReplicas
from lakelog.platform.groups.coordinator import GroupCoordinator
from lakelog.platform.layout import topic_path
from lakelog.platform.replication.copier import TableReplicator
from lakelog.platform.replication.errors import ElectionNotAllowed
from log_check import assert_topic_intact
from tests.patience import STUCK_S

pytestmark = pytest.mark.slow


def _local_sites(tmp_path, *names: str) -> dict[str, str]:
    return {name: str(tmp_path / f"site-{name}") for name in names}


def _read_all(broker: Broker, topic: str, partitions: int) -> dict[tuple[int, int], bytes]:
    found = {}
    for p in range(partitions):
        for record in broker.fetch(topic, p, 0, max_records=1_000_000):
            assert (p, record.offset) not in found
            found[(p, record.offset)] = record.value
        offsets = sorted(o for (pp, o) in found if pp == p)
        assert offsets == list(range(len(offsets)))  # dense
    return found


@pytest.mark.s3
def test_leader_site_lost_under_acks_all_load_then_clean_election(tmp_path, moto_process, make_replicated) -> None:
    proc, s3 = moto_process()
    sites = {"a": str(tmp_path / "site-a"), "b": str(tmp_path / "site-b"), "c": s3.root("site-c")}
    fast_fail = {"timeout": "2s", "connect_timeout": "1s", "max_retries": "1", "retry_timeout": "3s"}
    broker = make_replicated(sites, {"c": {**s3.options, **fast_fail}}, request_timeout_ms=3000)
    broker.create_topic("orders", 3, {"replication.factor": 3, "min.insync.replicas": 2}, replicas=["c", "a", "b"])
    assert broker.replicas.state("orders").leader == "c"

    acked: dict[tuple[int, int], bytes] = {}
    stop = threading.Event()

    def produce_load(tag: str) -> None:
        i = 0
        while not stop.is_set():
            records = [Record(f"{tag}-{i}-{j}".encode(), key=f"k{j}".encode()) for j in range(5)]
            i += 1
            try:
                result = broker.produce("orders", records, acks="all", timeout_ms=3000)
            except LakelogError:
                continue  # not acknowledged: may or may not be there, never counted
            for record, (p, o, _) in zip(records, result.records()):
                acked[(p, o)] = record.value

    threads = [threading.Thread(target=produce_load, args=(f"t{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + STUCK_S
    while len(acked) < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    # A consumer group reads what is there and commits (to the control table, on site a).
    coordinator = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
    committed = {}
    for p in range(3):
        consumed = broker.fetch("orders", p, 0, max_records=1_000_000)
        committed[p] = consumed.next_offset or 0
    coordinator.commit("billing", None, -1, [("orders", p, o, None) for p, o in committed.items()]).result()
    coordinator.close()
    proc.kill()  # the leader site becomes unreachable mid-load
    proc.wait()
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join()
    assert len(acked) >= 100

    election = broker.elect_leader("orders")  # clean: an in-sync follower
    assert election.state.leader in ("a", "b") and election.state.leader_epoch == 1 and not election.warning

    stop.clear()
    threads = [threading.Thread(target=produce_load, args=("after",))]
    threads[0].start()
    while sum(1 for v in acked.values() if v.startswith(b"after")) < 50:
        time.sleep(0.05)
    stop.set()
    threads[0].join()

    found = _read_all(broker, "orders", 3)
    for key, value in acked.items():  # every acknowledged record, once, at its offset
        assert found[key] == value
    assert len(set(found.values())) == len(found)

    restarted = make_replicated(sites, {"c": {**s3.options, **fast_fail}})  # a new node finds the leader in the control table
    assert restarted.replicas.state("orders", refresh=True).leader == election.state.leader
    assert _read_all(restarted, "orders", 3) == found
    resumed = GroupCoordinator(restarted, initial_rebalance_delay_ms=0)  # the group resumes from its commits
    try:
        assert {tp[1]: c.offset for tp, c in resumed.committed("billing").items()} == committed
        for p, offset in committed.items():
            rest = {(p, r.offset) for r in restarted.fetch("orders", p, offset, max_records=1_000_000)}
            assert rest == {key for key in found if key[0] == p and key[1] >= offset}
    finally:
        resumed.close()
    assert_topic_intact(sites[election.state.leader], "orders")  # the new leader's table, as Delta readers see it


def test_acks_all_refused_with_too_few_in_sync_replicas_acks_1_still_works(tmp_path, moto_process,
                                                                           make_replicated) -> None:
    (proc_b, s3_b), (proc_c, s3_c) = moto_process(), moto_process()
    sites = {"a": str(tmp_path / "site-a"), "b": s3_b.root("b"), "c": s3_c.root("c")}
    fast_fail = {"timeout": "2s", "connect_timeout": "1s", "max_retries": "1", "retry_timeout": "3s"}
    broker = make_replicated(sites, {"b": {**s3_b.options, **fast_fail}, "c": {**s3_c.options, **fast_fail}},
                             replica_lag_time_max_ms=200)
    broker.create_topic("t", 1, {"replication.factor": 3, "min.insync.replicas": 2}, replicas=["a", "b", "c"])
    assert broker.produce("t", [Record(b"first")], acks="all").offsets.tolist() == [0]
    for proc in (proc_b, proc_c):
        proc.kill()
        proc.wait()
    time.sleep(0.3)
    broker.sync_replicas(["t"])  # the replication schedule notices the followers are gone
    assert broker.replicas.state("t").isr == ("a",)
    log = broker.topic_log("t")
    before = (log.log_end_offset(0), log.version)
    with pytest.raises(NotEnoughReplicas) as info:
        broker.produce("t", [Record(b"refused")], acks="all")
    assert info.value.retriable
    log.refresh()
    assert (log.log_end_offset(0), log.version) == before  # nothing written
    assert broker.produce("t", [Record(b"acks-1")], acks=1).offsets.tolist() == [1]
    assert [r.value for r in broker.fetch("t", 0, 0)] == [b"first", b"acks-1"]


def test_unclean_election_needs_the_flag_and_old_leader_is_truncated(tmp_path, make_replicated,
                                                                     table_fingerprint) -> None:
    sites = _local_sites(tmp_path, "a", "b", "c")
    broker = make_replicated(sites)
    broker.create_topic("t", 2, {"replication.factor": 3, "min.insync.replicas": 2}, replicas=["a", "b", "c"])
    for i in range(5):
        broker.produce("t", [Record(f"acked-{i}".encode(), partition=i % 2)], acks="all")

    # c falls out of sync (it stops receiving commits for longer than replica.lag.time.max.ms)
    state = broker.replicas.state("t")
    broker.replicas.store.save(state.with_isr(["a", "b"]))
    with pytest.raises(ElectionNotAllowed, match="--unclean"):
        broker.elect_leader("t", site="c")

    # the leader, cut off from the others, takes acks=1 commits that never reach them
    for i in range(3):
        broker.produce("t", [Record(f"lost-{i}".encode(), partition=0)], acks=1)
    election = broker.elect_leader("t", site="b")
    assert election.state.leader == "b" and election.state.isr == ("b",) or "a" not in election.state.isr
    for i in range(4):  # the new leader writes its own commits at the same versions
        broker.produce("t", [Record(f"new-{i}".encode(), partition=0)], acks=1)

    broker.sync_replicas(["t"])  # a returns: truncated after the last common version, then catches up
    assert table_fingerprint(broker.replicas.sites["a"], "t") == table_fingerprint(broker.replicas.sites["b"], "t")
    assert table_fingerprint(broker.replicas.sites["c"], "t") == table_fingerprint(broker.replicas.sites["b"], "t")
    assert set(broker.replicas.state("t").isr) == {"a", "b", "c"}
    values = set(_read_all(broker, "t", 2).values())
    assert {f"acked-{i}".encode() for i in range(5)} <= values
    assert {f"new-{i}".encode() for i in range(4)} <= values
    assert not any(v.startswith(b"lost-") for v in values)

    with pytest.raises(ElectionNotAllowed):
        broker.elect_leader("t", site="zz")
    broker.replicas.store.save(broker.replicas.state("t").with_isr(["b"]))
    unclean = broker.elect_leader("t", site="c", unclean=True)
    assert unclean.state.leader == "c" and "lost" in unclean.warning


def test_copy_resumes_after_a_crash_without_copying_twice(tmp_path, make_replicated, table_fingerprint) -> None:
    sites = _local_sites(tmp_path, "a", "b")
    broker = make_replicated(sites)
    broker.create_topic("t", 2, {"replication.factor": 2}, replicas=["a", "b"])
    for i in range(30):
        broker.produce("t", [Record(f"v{i}".encode(), partition=i % 2)], acks=1)
    state = broker.replicas.state("t")
    replicator = TableReplicator(broker.replicas.sites["a"], broker.replicas.sites["b"], topic_path("t"))
    # a crash after copying a version's data files but before its commit file
    target_version = replicator.target_version()
    commit = replicator.source.read_bytes(commit_uri(replicator.source_table, target_version + 1))
    replicator.copier(added_paths(commit))
    assert replicator.target_version() == target_version  # no commit visible yet
    report = broker.replicas.replicator(state, "b").catch_up()
    assert report.stats.skipped >= 1  # the files already there were not copied again
    assert table_fingerprint(broker.replicas.sites["a"], "t") == table_fingerprint(broker.replicas.sites["b"], "t")


def test_fetch_from_the_nearest_in_sync_replica(tmp_path, make_replicated) -> None:
    broker = make_replicated(_local_sites(tmp_path, "a", "b"))
    broker.create_topic("t", 1, {"replication.factor": 2, "min.insync.replicas": 2}, replicas=["a", "b"])
    broker.produce("t", [Record(b"everywhere")], acks="all")
    broker.produce("t", [Record(b"leader-only")], acks=1)  # not copied until the next replication round
    assert [r.value for r in broker.fetch("t", 0, 0, site="b")] == [b"everywhere"]
    # At the leader too, a consumer sees only what min.insync.replicas sites hold (the high watermark).
    at_leader = broker.fetch("t", 0, 0, site="a")
    assert [r.value for r in at_leader] == [b"everywhere"] and at_leader.high_watermark == 1
    assert broker.fetch("t", 0, 1, site="a").records.num_rows == 0  # not yet visible, not out of range
    broker.sync_replicas(["t"])
    time.sleep(0.15)  # past refresh_interval_ms: the follower's table is re-read
    assert [r.value for r in broker.fetch("t", 0, 0, site="b")] == [b"everywhere", b"leader-only"]
    assert [r.value for r in broker.fetch("t", 0, 0, site="a")] == [b"everywhere", b"leader-only"]


def test_control_tables_are_replicated_commit_for_commit(tmp_path, make_replicated) -> None:
    sites = _local_sites(tmp_path, "a", "b")
    broker = make_replicated(sites)
    broker.create_topic("t1", 1, {"replication.factor": 2}, replicas=["a", "b"])
    broker.create_topic("t2", 3, {"replication.factor": 1}, replicas=["b"])
    broker.sync_replicas()
    a, b = broker.replicas.sites["a"], broker.replicas.sites["b"]
    catalog = "_catalog/topics"
    assert versions(b, b.uri(catalog)) == versions(a, a.uri(catalog))
    replica_view = Broker(broker.settings.model_copy(update={"control_site": "b"}))
    try:
        assert [t.name for t in replica_view.list_topics()] == ["t1", "t2"]
    finally:
        replica_view.close()


def test_a_follower_behind_the_leaders_kept_commits_starts_from_a_checkpoint(tmp_path, make_replicated,
                                                                             monkeypatch) -> None:
    from lakelog.platform.log import RETAINED_COMMITS, checkpoints

    monkeypatch.setattr(checkpoints, "CLEANUP_DELAY_S", 0.0)  # the leader cleans its log as soon as it may

    broker = make_replicated(_local_sites(tmp_path, "a", "b"))
    broker.create_topic("t", 2, {"replication.factor": 2}, replicas=["a", "b"])
    for i in range(RETAINED_COMMITS + 40):  # acks=1, no replication round: b stays at version 0
        broker.produce("t", [Record(f"v{i}".encode(), partition=i % 2)], acks=1)
    a, b = broker.replicas.sites["a"], broker.replicas.sites["b"]
    deadline = time.monotonic() + STUCK_S  # checkpoints and log cleanup run on the background maintenance thread
    while versions(a, a.uri(topic_path("t")))[0] <= 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert versions(a, a.uri(topic_path("t")))[0] > 1  # the leader no longer keeps the early commits
    broker.sync_replicas(["t"])
    assert "b" in broker.replicas.state("t").isr
    for p in range(2):
        leader = [(r.offset, r.value) for r in broker.fetch("t", p, 0, max_records=10_000)]
        time.sleep(0.15)
        follower = [(r.offset, r.value) for r in broker.fetch("t", p, 0, max_records=10_000, site="b")]
        assert follower == leader and len(leader) == (RETAINED_COMMITS + 40) // 2
    assert len(versions(b, b.uri(topic_path("t")))) <= RETAINED_COMMITS + 25  # as short as the leader's
