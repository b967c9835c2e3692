"""Two nodes acting on one transactional id's state at once, on one root (real brokers, local root).

- Two coordinators both believing they own the id (one cut off from the cluster without knowing it yet):
  the one acting on a state the other changed since stores nothing (NOT_COORDINATOR), reads the id again
  and then goes on from the latest state; the id's rows stay one sequence.
- A TxnOffsetCommit staged on the group's node while the coordinator ends the transaction: a staging that
  lands after the commit read the staged offsets is refused, never answered as committed.
- A TxnOffsetCommit staged on the group's node while that node reads the ids' states again: staged under the
  transaction that read finds, not the one before it (which no commit reads again).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from lakelog.platform import Broker
from lakelog.platform.cluster.errors import NotCoordinator
from lakelog.platform.groups import GroupCoordinator
from lakelog.platform.storage import Storage
from lakelog.platform.transactions.coordinator import TransactionCoordinator
from lakelog.platform.transactions.errors import InvalidTxnState, TransactionCoordinatorFenced
from lakelog.platform.transactions.state import PendingOffset, Transaction, TxnState
from lakelog.platform.transactions.store import TransactionStore
from log_check import assert_topic_intact
from test_transaction_handover import assert_one_writer
from tests.patience import STUCK_S

TID = "etl"


def coordinator(broker: Broker, groups: GroupCoordinator, owns=lambda _: True) -> TransactionCoordinator:  # type: ignore[no-untyped-def]
    return TransactionCoordinator(broker.storage, broker.topic_log, groups.commit_transactional, groups.committed,
                                  reap_interval_s=3600, owns=owns)


@dataclass
class TwoNodes:
    """The id's coordinator and a group's node that does not coordinate it, on one root."""
    owner: TransactionCoordinator
    owner_groups: GroupCoordinator
    staging_node: TransactionCoordinator


@contextmanager
def owner_and_group_node(root: str) -> Iterator[TwoNodes]:
    with Broker(root=root) as txn_node, Broker(root=root) as group_node:
        txn_node.create_topic("a", 1)
        txn_groups = GroupCoordinator(txn_node, initial_rebalance_delay_ms=0)
        group_groups = GroupCoordinator(group_node, initial_rebalance_delay_ms=0)
        nodes = TwoNodes(coordinator(txn_node, txn_groups), txn_groups,
                         coordinator(group_node, group_groups, owns=lambda _: False))
        try:
            yield nodes
        finally:
            nodes.owner.close()
            nodes.staging_node.close()
            txn_groups.close()
            group_groups.close()
    assert_topic_intact(root, "a")


def test_a_save_made_from_a_state_no_longer_the_latest_is_refused(tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    first, second = TransactionStore(Storage(root)), TransactionStore(Storage(root))
    stored = first.save(Transaction(TID, 7, 0, 60_000))
    assert second.load()[TID].row_written == stored.row_written
    newer = second.save(Transaction(TID, 7, 1, 60_000, row_written=stored.row_written))

    with pytest.raises(TransactionCoordinatorFenced):  # made from the row `second` replaced
        first.save(Transaction(TID, 7, 1, 60_000, TxnState.ONGOING, number=1, row_written=stored.row_written))
    with pytest.raises(TransactionCoordinatorFenced):  # a new id's first row, when it has one already
        first.save(Transaction(TID, 9, 0, 60_000))
    other = first.save(Transaction("other", 8, 0, 60_000))  # another id is not held up
    latest = first.save(Transaction(TID, 7, 2, 60_000, row_written=newer.row_written))

    states = TransactionStore(Storage(root)).load()
    assert states[TID] == latest and states[TID].producer_epoch == 2 and states["other"] == other


def test_a_coordinator_acting_on_a_stale_state_is_fenced_then_goes_on_from_the_latest(tmp_path: Path) -> None:
    root = str(tmp_path / "data")
    with Broker(root=root) as one_node, Broker(root=root) as other_node:
        one_node.create_topic("a", 1)
        one_groups = GroupCoordinator(one_node, initial_rebalance_delay_ms=0)
        other_groups = GroupCoordinator(other_node, initial_rebalance_delay_ms=0)
        one, other = coordinator(one_node, one_groups), coordinator(other_node, other_groups)
        try:
            txn = one.init_producer_id(TID, 60_000)
            pid, epoch = txn.producer_id, txn.producer_epoch
            one.add_partitions(TID, pid, epoch, frozenset({("a", 0)}))
            one.add_offsets(TID, pid, epoch, "g1")
            # The other node, also sure it coordinates the id, reads it and adds a group to the transaction.
            other.add_offsets(TID, pid, epoch, "g2")
            other.txn_offset_commit(TID, pid, epoch, (PendingOffset("g2", "in", 0, 42),))

            # `one` still holds the state from before: its commit would leave g2's offset out. Refused.
            with pytest.raises(NotCoordinator):
                one.end_txn(TID, pid, epoch, True)
            assert [row[2] for row in assert_one_writer(root, TID)][-1] == "Ongoing"

            # Asked again, it reads the id first and commits the transaction as it stands.
            done = one.end_txn(TID, pid, epoch, True)
            assert done.state is TxnState.COMPLETE_COMMIT and done.number == txn.number + 1
            assert one_groups.committed("g2")[("in", 0)].offset == 42
            assert [row[2] for row in assert_one_writer(root, TID)][-2:] == ["PrepareCommit", "CompleteCommit"]
        finally:
            one.close()
            other.close()
            one_groups.close()
            other_groups.close()
    assert_topic_intact(root, "a")


def test_offsets_staged_after_the_commit_read_them_are_refused(tmp_path: Path, monkeypatch) -> None:
    with owner_and_group_node(str(tmp_path / "data")) as nodes:
        owner, staging_node = nodes.owner, nodes.staging_node
        txn = owner.init_producer_id(TID, 60_000)
        pid, epoch = txn.producer_id, txn.producer_epoch
        owner.add_partitions(TID, pid, epoch, frozenset({("a", 0)}))
        owner.add_offsets(TID, pid, epoch, "g")
        staging_node.stage_offsets(TID, pid, epoch, (PendingOffset("g", "in", 0, 10),))  # in time

        # A late TxnOffsetCommit: checked while Ongoing, its file written once the commit is over.
        staging = type(staging_node._staging)
        real_stage = staging.stage_offsets

        def late(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            if self is staging_node._staging:
                assert owner.end_txn(TID, pid, epoch, True).state is TxnState.COMPLETE_COMMIT
            return real_stage(self, *args, **kwargs)

        monkeypatch.setattr(staging, "stage_offsets", late)
        with pytest.raises(InvalidTxnState):
            staging_node.stage_offsets(TID, pid, epoch, (PendingOffset("g", "in", 0, 20),))
        assert nodes.owner_groups.committed("g")[("in", 0)].offset == 10  # what the commit read, and answered

def test_offsets_staged_while_the_node_reads_the_states_again_go_to_the_transaction_that_read_finds(
        tmp_path: Path, monkeypatch) -> None:
    release = threading.Event()
    with owner_and_group_node(str(tmp_path / "data")) as nodes:
        owner, staging_node = nodes.owner, nodes.staging_node
        txn = owner.init_producer_id(TID, 60_000)
        pid, epoch = txn.producer_id, txn.producer_epoch
        for offset in (10, 20):  # two transactions, each staging the group's offset on the group's node
            owner.add_partitions(TID, pid, epoch, frozenset({("a", 0)}))
            owner.add_offsets(TID, pid, epoch, "g")
            if offset == 10:
                staging_node.stage_offsets(TID, pid, epoch, (PendingOffset("g", "in", 0, offset),))
                assert owner.end_txn(TID, pid, epoch, True).state is TxnState.COMPLETE_COMMIT

        # The group's node starts reading the states again (its reaper), slow to read the rows...
        store_type = type(staging_node._store)
        real_read = store_type._read_latest
        reading = threading.Event()

        def slow_read(self):  # type: ignore[no-untyped-def]
            if threading.current_thread() is reader:
                reading.set()
                release.wait()
            return real_read(self)

        monkeypatch.setattr(store_type, "_read_latest", slow_read)
        reader = threading.Thread(target=staging_node.tick)
        reader.start()
        try:
            assert reading.wait(timeout=STUCK_S)
            # ... while the second transaction's TxnOffsetCommit comes in.
            with ThreadPoolExecutor(1) as pool:
                staged = pool.submit(staging_node.stage_offsets, TID, pid, epoch, (PendingOffset("g", "in", 0, 20),))
                try:
                    staged.result(timeout=2)  # the old code answered at once, from the states before the read
                except TimeoutError:
                    pass  # waits for the read under way
                release.set()
                staged.result()
        finally:
            release.set()
            reader.join()
        assert owner.end_txn(TID, pid, epoch, True).state is TxnState.COMPLETE_COMMIT
        assert nodes.owner_groups.committed("g")[("in", 0)].offset == 20
