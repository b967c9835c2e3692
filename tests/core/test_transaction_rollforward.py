"""A transaction across two topics and a group's offsets, whose node stops right after the commit decision
(PrepareCommit stored, nothing filled yet, or one table filled and not the other): the next coordinator on
the root rolls it forward from the stored decision, so every table and the group's offsets hold it, never
half of it. An ongoing transaction left behind is aborted at its timeout. Real broker, local root; each
test ends with the offset scan and DuckDB's read."""

from __future__ import annotations

import time

import pyarrow as pa

from delta_readers import assert_duckdb_agrees
from lakelog.platform import Broker
from lakelog.platform.groups import GroupCoordinator
from lakelog.platform.records import RecordColumns, columns_to_table
from lakelog.platform.transactions import state
from lakelog.platform.transactions.coordinator import TransactionCoordinator
from lakelog.platform.transactions.state import PendingOffset, TxnState
from log_check import aborted_ranges, assert_topic_intact
from patience import STUCK_S


def records(*values: bytes) -> pa.Table:
    return columns_to_table([RecordColumns([None] * len(values), list(values), None, None, [0] * len(values))])


def coordinator(broker: Broker, groups: GroupCoordinator) -> TransactionCoordinator:
    return TransactionCoordinator(broker.storage, broker.topic_log, groups.commit_transactional, groups.committed,
                                  reap_interval_s=0.05)


def values(broker: Broker, topic: str) -> list[bytes]:
    return broker.fetch(topic, 0, 0, 100).records.column("value").to_pylist()


def until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + STUCK_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def open_transaction(txns: TransactionCoordinator, tid: str = "etl") -> state.Transaction:
    txn = txns.init_producer_id(tid, 60_000)
    pid, epoch = txn.producer_id, txn.producer_epoch
    txns.add_partitions(tid, pid, epoch, frozenset({("a", 0), ("b", 0)}))
    txns.add_offsets(tid, pid, epoch, "g")
    assert txns.produce(tid, pid, epoch, "a", 0, 0, records(b"a1", b"a2"), 30_000) == 0
    assert txns.produce(tid, pid, epoch, "b", 0, 0, records(b"b1"), 30_000) == 0
    return txns.txn_offset_commit(tid, pid, epoch, (PendingOffset("g", "in", 0, 42),))


def test_a_commit_decided_before_a_crash_is_rolled_forward(tmp_path, monkeypatch) -> None:
    root = str(tmp_path / "data")
    with Broker(root=root) as broker:
        for topic in ("a", "b", "in"):
            broker.create_topic(topic, 1)
        groups = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        txns = coordinator(broker, groups)
        txn = open_transaction(txns)
        filled: list[str] = []
        real_fill = type(broker.topic_log("a")).fill

        def crash_after_the_first_table(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            if filled:
                raise SystemExit("the node dies mid-commit")
            filled.append(self.name)
            return real_fill(self, *args, **kwargs)

        txns.close()  # no reaper: the crash stays as it is until the next coordinator
        monkeypatch.setattr(type(broker.topic_log("a")), "fill", crash_after_the_first_table)
        try:
            txns.end_txn("etl", txn.producer_id, txn.producer_epoch, True)
        except SystemExit:
            pass
        monkeypatch.undo()
        assert filled == ["a"] and values(broker, "a") == [b"a1", b"a2"] and values(broker, "b") == []
        assert txns.describe("etl").state is TxnState.PREPARE_COMMIT  # the durable decision
        groups.close()

    with Broker(root=root) as broker:  # another node (or the same, restarted) takes the id over
        groups = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        txns = coordinator(broker, groups)
        try:
            until(lambda: txns.describe("etl").state is TxnState.COMPLETE_COMMIT, "the commit is rolled forward")
            assert values(broker, "a") == [b"a1", b"a2"] and values(broker, "b") == [b"b1"]
            assert groups.committed("g")[("in", 0)].offset == 42
        finally:
            txns.close()
            groups.close()
    for topic in ("a", "b"):
        assert_topic_intact(root, topic)
        assert_duckdb_agrees(root, topic)


def test_an_ongoing_transaction_left_by_a_dead_node_is_aborted_at_its_timeout(tmp_path) -> None:
    root = str(tmp_path / "data")
    with Broker(root=root) as broker:
        for topic in ("a", "b", "in"):
            broker.create_topic(topic, 1)
        groups = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        txns = coordinator(broker, groups)
        txns.close()
        txn = txns.init_producer_id("short", 1_000)
        txns.add_partitions("short", txn.producer_id, txn.producer_epoch, frozenset({("a", 0)}))
        txns.produce("short", txn.producer_id, txn.producer_epoch, "a", 0, 0, records(b"lost"), 30_000)
        groups.close()
    with Broker(root=root) as broker:
        groups = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        txns = coordinator(broker, groups)
        try:
            until(lambda: txns.describe("short").state is TxnState.COMPLETE_ABORT, "the timeout abort")
            assert txns.describe("short").producer_epoch == txn.producer_epoch + 1  # the producer is fenced
            broker.topic_log("a").refresh()
            assert values(broker, "a") == [] and broker.topic_log("a").last_stable_offset(0) == 2  # and its marker
        finally:
            txns.close()
            groups.close()
    assert aborted_ranges(root, "a") == {0: {0, 1}}
    assert_topic_intact(root, "a")
    assert_duckdb_agrees(root, "a")


def test_an_idle_transactional_id_expires(tmp_path) -> None:
    with Broker(root=str(tmp_path / "data")) as broker:
        groups = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        txns = TransactionCoordinator(broker.storage, broker.topic_log, groups.commit_transactional,
                                      groups.committed, id_expiration_ms=200, reap_interval_s=0.05)
        try:
            first = txns.init_producer_id("idle", 60_000)
            until(lambda: txns.describe("idle").state is TxnState.DEAD, "transactional.id.expiration.ms")
            again = txns.init_producer_id("idle", 60_000)  # starts over: a new producer id, epoch 0
            assert again.producer_id != first.producer_id and again.producer_epoch == 0
        finally:
            txns.close()
            groups.close()
