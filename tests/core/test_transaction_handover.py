"""A transactional id moving between two coordinators (nodes on one root) while its commit is being
written: the old coordinator stops as soon as it learns it lost the id (NOT_COORDINATOR, no more state
rows), the new one acts on the id only once the old one published that it let go, and rolls the commit
forward then. The id's rows in `_control/transactions` are one writer's sequence (never interleaved), the
transaction ends committed whole. Real brokers, local root; ends with the offset scan."""

from __future__ import annotations

import threading
import time

import pytest
from deltalake import DeltaTable

from lakelog.platform import Broker
from lakelog.platform.cluster.errors import NotCoordinator
from lakelog.platform.cluster.ownership import owner, transaction_key
from lakelog.platform.groups import GroupCoordinator
from lakelog.platform.layout import TRANSACTIONS_TABLE
from lakelog.platform.transactions.coordinator import TransactionCoordinator
from lakelog.platform.transactions.handover import Handover
from lakelog.platform.transactions.state import TxnState
from log_check import assert_topic_intact
from patience import STUCK_S
from test_transaction_rollforward import open_transaction, until, values

TID = "etl"
# Two node ids such that the id moves from OLD (alone) to NEW when NEW joins.
OLD, NEW = ("n1", "n2") if owner(transaction_key(TID), ["n1", "n2"]) == "n2" else ("n2", "n1")
BOTH = [OLD, NEW]
RANK = {"Ongoing": 1, "PrepareCommit": 2, "PrepareAbort": 2, "CompleteCommit": 3, "CompleteAbort": 3, "Empty": 4,
        "Dead": 5}


def owns(node: str, nodes: list[str]):  # type: ignore[no-untyped-def]
    return lambda tid: owner(transaction_key(tid), nodes) == node


def assert_one_writer(root: str, tid: str) -> list[tuple[int, int, str]]:
    """The id's rows in write order follow the state machine forward: (epoch, number, state) never goes
    back, and only an Ongoing row repeats (two writers completing one transaction, or an old one's row
    after a newer epoch, would break it)."""
    rows = DeltaTable(f"{root}/{TRANSACTIONS_TABLE}").to_pyarrow_table().to_pylist()
    rows = sorted((r for r in rows if r["transactional_id"] == tid), key=lambda r: r["written"])
    keys = [(r["producer_epoch"], r["number"], RANK[r["state"]]) for r in rows]
    for before, after, row in zip(keys, keys[1:], rows[1:]):
        assert after > before or (after == before and row["state"] == "Ongoing"), \
            [(r["producer_epoch"], r["number"], r["state"]) for r in rows]
    return [(r["producer_epoch"], r["number"], r["state"]) for r in rows]


def test_an_id_moved_mid_commit_is_completed_by_one_coordinator_at_a_time(tmp_path, monkeypatch) -> None:
    root = str(tmp_path / "data")
    published = {OLD: [OLD], NEW: [OLD]}  # each node's heartbeat object: the view it acted on
    with Broker(root=root) as old_node, Broker(root=root) as new_node:
        for topic in ("a", "b", "in"):
            old_node.create_topic(topic, 1)
        old_groups, new_groups = (GroupCoordinator(old_node, initial_rebalance_delay_ms=0),
                                  GroupCoordinator(new_node, initial_rebalance_delay_ms=0))
        old_handover, new_handover = Handover(), Handover()
        old_handover.reassign(lambda t: False, owns(OLD, [OLD]), [OLD], lambda: {}, poll_s=0.02, wait_s=STUCK_S)
        new_handover.reassign(lambda t: False, lambda t: False, [OLD], lambda: {OLD: published[OLD]},
                              poll_s=0.02, wait_s=STUCK_S)
        old = TransactionCoordinator(old_node.storage, old_node.topic_log, old_groups.commit_transactional,
                                     old_groups.committed, reap_interval_s=0.05, handover=old_handover)
        new = TransactionCoordinator(new_node.storage, new_node.topic_log, new_groups.commit_transactional,
                                     new_groups.committed, reap_interval_s=0.05, handover=new_handover)
        try:
            until(lambda: old.owns(TID), "the old node serves the id")
            txn = open_transaction(old, TID)

            # The old node's commit stops in its first fill, its decision (PrepareCommit) stored.
            entered, gate = threading.Event(), threading.Event()
            old_logs = {id(old_node.topic_log(t)) for t in ("a", "b")}
            real_fill = type(old_node.topic_log("a")).fill

            def slow_fill(self, *args, **kwargs):  # type: ignore[no-untyped-def]
                if id(self) in old_logs:
                    entered.set()
                    assert gate.wait(STUCK_S)
                return real_fill(self, *args, **kwargs)

            monkeypatch.setattr(type(old_node.topic_log("a")), "fill", slow_fill)
            ended: list[BaseException | None] = []

            def end() -> None:
                try:
                    old.end_txn(TID, txn.producer_id, txn.producer_epoch, True)
                    ended.append(None)
                except BaseException as exc:  # noqa: BLE001 - the outcome is asserted below
                    ended.append(exc)

            committer = threading.Thread(target=end)
            committer.start()
            assert entered.wait(STUCK_S)

            # NEW joins; its round comes first: it owns the id but OLD has not let go.
            new_handover.reassign(lambda t: False, owns(NEW, BOTH), BOTH, lambda: {OLD: published[OLD]},
                                  poll_s=0.02, wait_s=STUCK_S)
            published[NEW] = BOTH
            with pytest.raises(NotCoordinator):  # a zombie-fencing producer there is told to retry
                new.init_producer_id(TID, 60_000)
            time.sleep(0.3)  # the new node's reaper leaves the prepared commit alone meanwhile
            assert new.describe(TID) is None or new.describe(TID).state is not TxnState.COMPLETE_COMMIT

            # OLD learns it lost the id: refuses at once, and lets go once its commit call stopped.
            let_go = threading.Thread(target=old_handover.reassign, args=(
                owns(OLD, [OLD]), owns(OLD, BOTH), BOTH, lambda: {NEW: published[NEW]}), kwargs=dict(
                poll_s=0.02, wait_s=STUCK_S))
            let_go.start()
            until(lambda: not old.owns(TID), "the old node stops serving the id")
            with pytest.raises(NotCoordinator):
                old.add_offsets(TID, txn.producer_id, txn.producer_epoch, "g")
            time.sleep(0.2)
            assert let_go.is_alive()  # its commit call is still in progress
            gate.set()
            committer.join(STUCK_S)
            let_go.join(STUCK_S)
            assert not let_go.is_alive() and len(ended) == 1 and isinstance(ended[0], NotCoordinator), ended
            published[OLD] = BOTH  # its heartbeat object carries the view it acted on

            # NEW acts now: the commit is rolled forward, then the client's InitProducerId fences.
            until(lambda: new.owns(TID), "the new node serves the id once released")
            until(lambda: (new.describe(TID) or txn).state is TxnState.COMPLETE_COMMIT, "rolled forward")
            again = new.init_producer_id(TID, 60_000)
            assert (again.producer_id, again.producer_epoch) == (txn.producer_id, txn.producer_epoch + 1)
            time.sleep(0.3)  # the old node's reaper stores nothing for the id it lost
            rows = assert_one_writer(root, TID)
            assert rows[-1] == (txn.producer_epoch + 1, txn.number, "Empty")
            assert [r[2] for r in rows].count("CompleteCommit") == 1
            assert values(new_node, "a") == [b"a1", b"a2"] and values(new_node, "b") == [b"b1"]
            assert new_groups.committed("g")[("in", 0)].offset == 42
        finally:
            gate.set()
            old.close()
            new.close()
            old_groups.close()
            new_groups.close()
    for topic in ("a", "b"):
        assert_topic_intact(root, topic)


def test_a_takeover_is_served_after_the_wait_when_the_old_node_never_publishes(tmp_path) -> None:
    """A node still claiming the id past `wait_s` is taken to be cut off (as groups do)."""
    handover = Handover()
    handover.reassign(lambda t: False, lambda t: True, BOTH, lambda: {OLD: [OLD]}, poll_s=0.02, wait_s=0.3)
    assert not handover.serving(TID)
    until(lambda: handover.serving(TID), "served after the wait")
    handover.close()
