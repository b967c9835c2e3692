"""`_control/transactions` compacted: it stays bounded over many transactions, a writer appending while
another store rewrites it loses nothing, and a transaction decided before a crash is still rolled forward
from the compacted table. Real brokers, local root; ends with the offset scan."""

from __future__ import annotations

import threading

from deltalake import DeltaTable

from lakelog.platform import Broker
from lakelog.platform.groups import GroupCoordinator
from lakelog.platform.layout import TRANSACTIONS_TABLE
from lakelog.platform.storage import Storage
from lakelog.platform.transactions.coordinator import TransactionCoordinator
from lakelog.platform.transactions.state import PendingOffset, Transaction, TxnState
from lakelog.platform.transactions.store import TRANSACTIONS_SCHEMA, TransactionStore
from lakelog.platform.transactions.store_compaction import Compactor
from log_check import assert_topic_intact
from test_transaction_rollforward import records, until, values

MIN_ROWS = 20


def table_rows(root: str) -> int:
    return DeltaTable(f"{root}/{TRANSACTIONS_TABLE}").to_pyarrow_table().num_rows


def coordinator(broker: Broker, groups: GroupCoordinator, reap_interval_s: float) -> TransactionCoordinator:
    return TransactionCoordinator(broker.storage, broker.topic_log, groups.commit_transactional, groups.committed,
                                  reap_interval_s=reap_interval_s, compact_min_rows=MIN_ROWS)


def one_transaction(txns: TransactionCoordinator, tid: str, value: bytes, commit: bool = True) -> Transaction:
    txn = txns.describe(tid) or txns.init_producer_id(tid, 60_000)
    pid, epoch = txn.producer_id, txn.producer_epoch
    txns.add_partitions(tid, pid, epoch, frozenset({("a", 0)}))
    txns.add_offsets(tid, pid, epoch, "g")
    txns.produce(tid, pid, epoch, "a", 0, 0, records(value), 30_000)
    txn = txns.txn_offset_commit(tid, pid, epoch, (PendingOffset("g", "in", 0, txn.number + 1),))
    if commit:
        txns.end_txn(tid, pid, epoch, True)
    return txn


def test_the_table_stays_bounded_and_recovery_reads_the_compacted_table(tmp_path, monkeypatch) -> None:
    root = str(tmp_path / "data")
    with Broker(root=root) as broker:
        for topic in ("a", "in"):
            broker.create_topic(topic, 1)
        groups = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        txns = coordinator(broker, groups, reap_interval_s=3600)  # ticks run here, one per transaction
        try:
            most = 0
            for i in range(40):
                one_transaction(txns, f"id{i % 3}", b"v%d" % i)
                txns.tick()
                most = max(most, table_rows(root))
            assert most <= MIN_ROWS + 6, most  # compacted at the tick after it passed the bound
            assert table_rows(root) < 40 * 4

            # The next transaction is decided, then the node dies before any fill.
            txn = one_transaction(txns, "id0", b"decided", commit=False)

            def crash(*args, **kwargs):  # type: ignore[no-untyped-def]
                raise SystemExit("the node dies mid-commit")

            monkeypatch.setattr(type(broker.topic_log("a")), "fill", crash)
            try:
                txns.end_txn("id0", txn.producer_id, txn.producer_epoch, True)
            except SystemExit:
                pass
            monkeypatch.undo()
        finally:
            txns.close()
            groups.close()

    # Compacted with the decision in it, and read back by the next node, which rolls the commit forward.
    storage = Storage(root)
    version = DeltaTable(f"{root}/{TRANSACTIONS_TABLE}").version()
    assert Compactor(storage, storage.uri(TRANSACTIONS_TABLE), TRANSACTIONS_SCHEMA).compact(version) == version + 1
    assert table_rows(root) == 3
    assert TransactionStore(storage).load()["id0"].state is TxnState.PREPARE_COMMIT
    with Broker(root=root) as broker:
        groups = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        txns = coordinator(broker, groups, reap_interval_s=0.05)
        try:
            until(lambda: txns.describe("id0").state is TxnState.COMPLETE_COMMIT, "the commit is rolled forward")
            assert values(broker, "a") == [b"v%d" % i for i in range(40)] + [b"decided"]
            assert groups.committed("g")[("in", 0)].offset == txn.offsets[0].offset  # the decided one's
            assert {t.transactional_id: t.state for t in txns.transactions()} == {
                "id0": TxnState.COMPLETE_COMMIT, "id1": TxnState.COMPLETE_COMMIT, "id2": TxnState.COMPLETE_COMMIT}
        finally:
            txns.close()
            groups.close()
    assert_topic_intact(root, "a")


def test_a_writer_appending_during_compactions_loses_no_row(tmp_path) -> None:
    root = str(tmp_path / "data")
    writer, compactor = TransactionStore(Storage(root)), TransactionStore(Storage(root), compact_min_rows=5)
    ids = [f"id{i}" for i in range(4)]
    last: dict[str, Transaction] = {}
    done = threading.Event()

    def write() -> None:
        try:
            for epoch in range(60):
                for tid in ids:  # each state made from the one stored before, as the coordinator does
                    made_from = last[tid].row_written if tid in last else 0
                    last[tid] = writer.save(Transaction(tid, 1, epoch, 1000, TxnState.EMPTY, row_written=made_from))
        finally:
            done.set()

    thread = threading.Thread(target=write)
    thread.start()
    compactions = 0
    while not done.is_set():
        compactor.load()
        compactions += compactor.compact_if_due()
    thread.join()
    assert compactions >= 1
    assert TransactionStore(Storage(root)).load() == last  # every id's last state, none older, none lost
