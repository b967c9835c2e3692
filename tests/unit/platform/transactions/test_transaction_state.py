"""The transaction coordinator's state machine against a model: producers come and go with the same
transactional id, add partitions and groups, produce, commit offsets, end transactions, time out.

Checked after every step: a stale producer never changes anything (fencing); the (producer id, epoch)
pairs handed out never repeat and epochs only grow per producer id; a decided outcome (PrepareCommit,
PrepareAbort) completes as decided; partitions, groups and offsets exist only while a transaction runs;
a batch is verified exactly when its producer is current and its partition part of the ongoing transaction.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, multiple, rule

from lakelog.platform.transactions import state as txns
from lakelog.platform.transactions.errors import (
    ConcurrentTransactions,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidTransactionTimeout,
    InvalidTxnState,
    ProducerFenced,
)
from lakelog.platform.transactions.state import PendingOffset, Transaction, TxnState

TID = "app-1"
PARTITIONS = [("orders", 0), ("orders", 1), ("audit", 0)]
GROUPS = ["g1", "g2"]
REFUSALS = (ConcurrentTransactions, InvalidProducerEpoch, InvalidProducerIdMapping, InvalidTxnState,
            ProducerFenced)


class Coordinator(RuleBasedStateMachine):
    """The system under test is the pure functions over one transactional id; `self.txn` is what the
    coordinator would have persisted."""

    sessions = Bundle("sessions")

    @initialize()
    def start(self) -> None:
        self.txn: Transaction | None = None
        self.now = 1_000
        self.next_id = 100
        self.issued: set[tuple[int, int]] = set()
        self.epochs: dict[int, int] = {}
        self.decided: TxnState | None = None  # the outcome a prepared transaction must reach

    # ---- helpers ------------------------------------------------------------

    def _fresh(self) -> int:
        self.next_id += 1
        return self.next_id

    def _store(self, new: Transaction) -> None:
        old = self.txn
        if old is not None and old.state.preparing and new.state is not old.state:
            done = {TxnState.PREPARE_COMMIT: TxnState.COMPLETE_COMMIT, TxnState.PREPARE_ABORT: TxnState.COMPLETE_ABORT}
            assert new.state is done[old.state], f"{old.state} went to {new.state}"
        self.txn = new

    def _refused(self, call) -> bool:  # type: ignore[no-untyped-def]
        """Run a call; on a refusal assert that nothing changed."""
        before = self.txn
        try:
            result = call()
        except REFUSALS:
            assert self.txn == before
            return True
        self._store(result)
        return False

    def _current(self, session: tuple[int, int]) -> bool:
        txn = self.txn
        return txn is not None and (txn.producer_id, txn.producer_epoch) == session

    def _complete_if_prepared(self) -> None:
        if self.txn is not None and self.txn.state.preparing:
            self.now += 1
            self._store(txns.complete(self.txn, self.now))
            self.decided = None  # that decision is done: the next transaction decides its own

    # ---- rules --------------------------------------------------------------

    @rule(target=sessions, recover=st.booleans(), timeout=st.sampled_from([1_000, 60_000]))
    def init(self, recover: bool, timeout: int):  # type: ignore[no-untyped-def]
        """A producer starts (or, KIP-360, recovers with the id and epoch it holds) with the transactional
        id; an ongoing transaction is aborted first, as the coordinator does, then it asks again."""
        self.now += 1
        expected = (self.txn.producer_id, self.txn.producer_epoch) if recover and self.txn else (-1, -1)
        fenced_abort = False
        for _ in range(3):
            try:
                new = txns.init_producer_id(self.txn, TID, timeout, self.now, self._fresh(), expected)
            except ConcurrentTransactions:
                self._complete_if_prepared()
                continue
            except ProducerFenced:
                # Only a recovering producer whose own ongoing transaction was just aborted under a new
                # epoch (it holds the epoch that abort fenced).
                assert fenced_abort and expected != (-1, -1)
                return multiple()
            if new.state.preparing:
                assert self.txn is not None and self.txn.state is TxnState.ONGOING
                assert new.producer_epoch > self.txn.producer_epoch or new.producer_epoch == txns.EPOCH_EXHAUSTED
                self._store(new)
                fenced_abort = True
                self._complete_if_prepared()
                continue
            break
        else:
            raise AssertionError("InitProducerId never settled")
        self._store(new)
        pair = (new.producer_id, new.producer_epoch)
        assert pair not in self.issued, f"{pair} handed out twice"
        assert new.producer_epoch > self.epochs.get(new.producer_id, -1)
        assert new.state is TxnState.EMPTY and not new.partitions
        self.issued.add(pair)
        self.epochs[new.producer_id] = new.producer_epoch
        return pair

    @rule(session=sessions, parts=st.frozensets(st.sampled_from(PARTITIONS), min_size=1))
    def add_partitions(self, session: tuple[int, int], parts: frozenset) -> None:
        self.now += 1
        was_preparing = self.txn is not None and self.txn.state.preparing
        before_state = self.txn.state if self.txn else None
        before_number = self.txn.number if self.txn else 0
        refused = self._refused(lambda: txns.add_partitions(self.txn, *session, parts, self.now))
        assert refused == (not self._current(session) or was_preparing)
        if not refused:
            assert self.txn.state is TxnState.ONGOING and parts <= self.txn.partitions
            # a new transaction gets a new number (staged records and fills are keyed by it), never reused
            began = before_state is not TxnState.ONGOING
            assert self.txn.number == before_number + (1 if began else 0)

    @rule(session=sessions, group=st.sampled_from(GROUPS))
    def add_offsets(self, session: tuple[int, int], group: str) -> None:
        self.now += 1
        was_preparing = self.txn is not None and self.txn.state.preparing
        refused = self._refused(lambda: txns.add_offsets(self.txn, *session, group, self.now))
        assert refused == (not self._current(session) or was_preparing)

    @rule(session=sessions, group=st.sampled_from(GROUPS), offset=st.integers(0, 1000))
    def commit_offset(self, session: tuple[int, int], group: str, offset: int) -> None:
        self.now += 1
        allowed = (self._current(session) and self.txn.state is TxnState.ONGOING and group in self.txn.groups)
        pending = (PendingOffset(group, "orders", 0, offset),)
        refused = self._refused(lambda: txns.txn_offset_commit(self.txn, *session, pending, self.now))
        assert refused == (not allowed)
        if not refused:
            assert pending[0] in self.txn.offsets

    @rule(session=sessions, part=st.sampled_from(PARTITIONS))
    def produce(self, session: tuple[int, int], part: tuple[str, int]) -> None:
        txn = self.txn
        allowed = (self._current(session) and txn.state is TxnState.ONGOING and part in txn.partitions)
        try:
            assert txns.verify_produce(txn, *session, part) is txn
            verified = True
        except REFUSALS:
            verified = False
        assert verified == allowed

    @rule(session=sessions, commit=st.booleans())
    def end(self, session: tuple[int, int], commit: bool) -> None:
        self.now += 1
        before = self.txn
        refused = self._refused(lambda: txns.end_txn(self.txn, *session, commit, self.now))
        if not self._current(session):
            assert refused
            return
        if before.state is TxnState.ONGOING:
            assert not refused
            assert self.txn.state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
            assert self.txn.partitions == before.partitions  # the decision carries what it must complete
            self.decided = self.txn.state
        elif before.state in (TxnState.EMPTY, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            assert refused
        else:  # a completed transaction: the same outcome is answered again, the other refused
            same = before.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
            assert refused != same

    @rule()
    def complete(self) -> None:
        if self.txn is not None and self.txn.state.preparing:
            self._complete_if_prepared()

    @rule(ms=st.integers(0, 70_000))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        if self.txn is None:
            return
        expired = txns.expire(self.txn, self.now)
        if expired is None:
            assert not txns.timed_out(self.txn, self.now)
            return
        before = self.txn
        assert before.state is TxnState.ONGOING
        self._store(expired)
        assert expired.state is TxnState.PREPARE_ABORT
        assert expired.producer_epoch > before.producer_epoch  # the quiet producer is fenced

    # ---- invariants ---------------------------------------------------------

    @invariant()
    def only_a_running_transaction_holds_partitions(self) -> None:
        txn = self.txn
        if txn is not None and txn.state.idle:
            assert not txn.partitions and not txn.groups and not txn.offsets and txn.started_ms == -1

    @invariant()
    def a_decision_is_kept(self) -> None:
        if self.decided is not None and self.txn is not None and self.txn.state.preparing:
            assert self.txn.state is self.decided


TestCoordinator = Coordinator.TestCase
TestCoordinator.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_timeout_out_of_range_is_refused() -> None:
    with pytest.raises(InvalidTransactionTimeout):
        txns.init_producer_id(None, TID, 900_001, 0, 7)
    with pytest.raises(InvalidTransactionTimeout):
        txns.init_producer_id(None, TID, 0, 0, 7)


def test_exhausted_epoch_draws_a_new_producer_id_and_a_lost_answer_is_answered_again() -> None:
    old = Transaction(TID, 5, txns.EPOCH_EXHAUSTED - 1, 60_000)
    new = txns.init_producer_id(old, TID, 60_000, 10, fresh_producer_id=9, expected=(5, txns.EPOCH_EXHAUSTED - 1))
    assert (new.producer_id, new.producer_epoch, new.last_producer_id) == (9, 0, 5)
    again = txns.init_producer_id(new, TID, 60_000, 11, fresh_producer_id=10, expected=(5, txns.EPOCH_EXHAUSTED - 1))
    assert (again.producer_id, again.producer_epoch) == (9, 0)
    with pytest.raises(ProducerFenced):
        txns.init_producer_id(new, TID, 60_000, 12, fresh_producer_id=11, expected=(4, 3))


def test_a_zombie_cannot_end_the_new_producers_transaction() -> None:
    first = txns.init_producer_id(None, TID, 60_000, 0, 42)
    ongoing = txns.add_partitions(first, 42, 0, frozenset({("orders", 0)}), 1)
    second = txns.init_producer_id(ongoing, TID, 60_000, 2, 43)  # a new producer: the zombie's txn aborts
    assert second.state is TxnState.PREPARE_ABORT and second.producer_epoch == 1
    second = txns.init_producer_id(txns.complete(second, 3), TID, 60_000, 4, 43)
    assert (second.producer_id, second.producer_epoch) == (42, 2)
    with pytest.raises(ProducerFenced):
        txns.end_txn(second, 42, 0, True, 5)
    with pytest.raises(InvalidProducerEpoch):
        txns.verify_produce(second, 42, 0, ("orders", 0))


def test_expiry_of_an_idle_id() -> None:
    txn = Transaction(TID, 1, 0, 60_000, updated_ms=0)
    assert txns.expire_id(txn, 10) is None
    assert txns.expire_id(txn, txns.DEFAULT_ID_EXPIRATION_MS).state is TxnState.DEAD
    ongoing = txns.add_partitions(txn, 1, 0, frozenset({("t", 0)}), 5)
    assert txns.expire_id(ongoing, 10 * txns.DEFAULT_ID_EXPIRATION_MS) is None
