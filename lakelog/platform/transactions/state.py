"""The transaction coordinator's state machine, pure: one transactional id's state and the calls that move it.

Kafka's rules (TransactionCoordinator and TransactionMetadata), with the server-side defences of KIP-890
part 1: a transactional batch or offset commit is accepted only for a partition or group added to the
ongoing transaction, with the current producer epoch; a stale epoch never changes anything.

Each call takes the current `Transaction` (None: the id is unknown) and the time, and answers the next
state or raises one of `errors.py`'s refusals (nothing changed). The coordinator persists each new state
before it answers, and completes a transaction in `PrepareCommit` / `PrepareAbort` (the durable decision)
by `complete`: a prepared transaction only ever goes to its own outcome, so a commit is never half applied
for good, and a node that takes the id over rolls it forward from the stored state.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from lakelog.platform.transactions.errors import (
    ConcurrentTransactions,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidTransactionTimeout,
    InvalidTxnState,
    ProducerFenced,
)

NO_PRODUCER_ID = -1
NO_EPOCH = -1
MAX_EPOCH = 32767  # int16
# Kafka draws a new producer id once the epoch reaches this (a bump must stay below int16's maximum).
EPOCH_EXHAUSTED = MAX_EPOCH - 1
DEFAULT_MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
DEFAULT_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms

TopicPartition = tuple[str, int]


class TxnState(str, Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"

    @property
    def preparing(self) -> bool:
        """The outcome is decided and durable; its markers (the tables' commits) are being written."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def idle(self) -> bool:
        """No transaction in progress: a new one may begin."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass(frozen=True)
class PendingOffset:
    """A TxnOffsetCommit's offset, committed to the group with the transaction."""

    group: str
    topic: str
    partition: int
    offset: int
    metadata: str | None = None


@dataclass(frozen=True)
class Transaction:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    number: int = 0  # transactions begun with this id: staged records and fills are keyed by it
    last_producer_id: int = NO_PRODUCER_ID  # the id before an exhausted epoch drew a new one (KIP-360)
    last_producer_epoch: int = NO_EPOCH  # the epoch before the latest bump: a lost bump's retry is answered
    started_ms: int = -1
    updated_ms: int = 0
    partitions: frozenset[TopicPartition] = frozenset()
    groups: frozenset[str] = frozenset()
    offsets: tuple[PendingOffset, ...] = field(default=())
    # The store's `written` of the row this state was read from or stored as (0: none). Carried unchanged
    # into the next state, so the store can refuse a change made from a state that is no longer the latest.
    row_written: int = field(default=0, compare=False)


def init_producer_id(current: Transaction | None, transactional_id: str, timeout_ms: int, now_ms: int,
                     fresh_producer_id: int, expected: tuple[int, int] = (NO_PRODUCER_ID, NO_EPOCH),
                     max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS) -> Transaction:
    """InitProducerId with a transactional id. `fresh_producer_id`: used when the id is new or its epoch is
    exhausted. `expected`: the producer id and epoch the client holds (KIP-360), or (-1, -1).

    An ongoing transaction is aborted under a bumped epoch (its producer is fenced): the answer is then in
    `PrepareAbort`, and the caller completes the abort and calls again for the client's answer."""
    if not 0 < timeout_ms <= max_timeout_ms:
        raise InvalidTransactionTimeout(
            f"transaction.timeout.ms {timeout_ms} is outside 1-{max_timeout_ms} (transaction.max.timeout.ms)")
    if current is None or current.state is TxnState.DEAD:
        return Transaction(transactional_id, fresh_producer_id, 0, timeout_ms, updated_ms=now_ms,
                           row_written=current.row_written if current else 0)
    if current.state.preparing:
        raise ConcurrentTransactions(
            f"transactional id {transactional_id!r}: the previous transaction is still completing")
    expected_id, expected_epoch = expected
    if expected_id != NO_PRODUCER_ID and not _may_continue(current, expected_id, expected_epoch):
        raise ProducerFenced(f"transactional id {transactional_id!r}: producer {expected_id} epoch "
                             f"{expected_epoch} was replaced by producer {current.producer_id}")
    if current.state is TxnState.ONGOING:
        return _abort_fencing(current, now_ms)
    if expected_id != NO_PRODUCER_ID and expected_epoch != current.producer_epoch:
        if (expected_id, expected_epoch) in ((current.producer_id, current.last_producer_epoch),
                                             (current.last_producer_id, current.last_producer_epoch)):
            return replace(current, timeout_ms=timeout_ms, updated_ms=now_ms)  # a bump whose answer was lost
        raise ProducerFenced(f"transactional id {transactional_id!r}: epoch {expected_epoch} is not the "
                             f"current {current.producer_epoch}")
    return _bumped(current, timeout_ms, now_ms, fresh_producer_id)


def _may_continue(current: Transaction, expected_id: int, expected_epoch: int) -> bool:
    # Kafka's isValidProducerId: the current id, or the previous one whose epoch ran out (a lost answer).
    return expected_id == current.producer_id or (
        expected_id == current.last_producer_id and expected_epoch == current.last_producer_epoch)


def _bumped(current: Transaction, timeout_ms: int, now_ms: int, fresh_producer_id: int) -> Transaction:
    cleared = replace(current, state=TxnState.EMPTY, timeout_ms=timeout_ms, updated_ms=now_ms, started_ms=-1,
                      partitions=frozenset(), groups=frozenset(), offsets=())
    if current.producer_epoch + 1 >= EPOCH_EXHAUSTED:
        return replace(cleared, producer_id=fresh_producer_id, producer_epoch=0,
                       last_producer_id=current.producer_id, last_producer_epoch=current.producer_epoch)
    return replace(cleared, producer_epoch=current.producer_epoch + 1, last_producer_epoch=current.producer_epoch)


def _abort_fencing(current: Transaction, now_ms: int) -> Transaction:
    """PrepareAbort under a bumped epoch: the producer that began the transaction can do nothing more (no
    previous epoch is kept, as Kafka's epoch fence keeps none: its InitProducerId retry is fenced too)."""
    epoch = current.producer_epoch + 1 if current.producer_epoch < EPOCH_EXHAUSTED else current.producer_epoch
    return replace(current, state=TxnState.PREPARE_ABORT, producer_epoch=epoch, last_producer_epoch=NO_EPOCH,
                   updated_ms=now_ms)


def check_producer(current: Transaction | None, producer_id: int, producer_epoch: int) -> Transaction:
    """The transaction of a call from (producer_id, producer_epoch), or the refusal of a stale producer."""
    if current is None or current.state is TxnState.DEAD or current.producer_id != producer_id:
        raise InvalidProducerIdMapping(f"producer id {producer_id} does not hold this transactional id")
    if producer_epoch != current.producer_epoch:
        raise ProducerFenced(f"transactional id {current.transactional_id!r}: producer epoch {producer_epoch} "
                             f"is not the current {current.producer_epoch} (fenced by a newer producer)")
    return current


def add_partitions(current: Transaction | None, producer_id: int, producer_epoch: int,
                   partitions: frozenset[TopicPartition], now_ms: int) -> Transaction:
    """AddPartitionsToTxn: the partitions join the transaction (which begins here if none is ongoing)."""
    txn = _begin_or_continue(current, producer_id, producer_epoch, now_ms)
    return replace(txn, partitions=txn.partitions | partitions)


def add_offsets(current: Transaction | None, producer_id: int, producer_epoch: int, group: str,
                now_ms: int) -> Transaction:
    """AddOffsetsToTxn: the group's offsets will be committed with the transaction."""
    txn = _begin_or_continue(current, producer_id, producer_epoch, now_ms)
    return replace(txn, groups=txn.groups | {group})


def _begin_or_continue(current: Transaction | None, producer_id: int, producer_epoch: int,
                       now_ms: int) -> Transaction:
    txn = check_producer(current, producer_id, producer_epoch)
    if txn.state.preparing:
        raise ConcurrentTransactions(f"transactional id {txn.transactional_id!r}: the previous transaction "
                                     "is still completing")
    if txn.state is TxnState.ONGOING:
        return replace(txn, updated_ms=now_ms)
    return replace(txn, state=TxnState.ONGOING, number=txn.number + 1, started_ms=now_ms, updated_ms=now_ms,
                   partitions=frozenset(), groups=frozenset(), offsets=())


def txn_offset_commit(current: Transaction | None, producer_id: int, producer_epoch: int,
                      offsets: tuple[PendingOffset, ...], now_ms: int) -> Transaction:
    """TxnOffsetCommit: offsets held with the transaction, for groups it added (KIP-890's verification)."""
    txn = check_producer(current, producer_id, producer_epoch)
    if txn.state is not TxnState.ONGOING:
        raise InvalidTxnState(f"transactional id {txn.transactional_id!r}: no ongoing transaction "
                              f"(state {txn.state.value}) to commit offsets with")
    unknown = sorted({o.group for o in offsets} - txn.groups)
    if unknown:
        raise InvalidTxnState(f"transactional id {txn.transactional_id!r}: group(s) {unknown} were not added "
                              "to the transaction (AddOffsetsToTxn)")
    latest = {(o.group, o.topic, o.partition): o for o in (*txn.offsets, *offsets)}
    return replace(txn, offsets=tuple(latest.values()), updated_ms=now_ms)


def verify_produce(current: Transaction | None, producer_id: int, producer_epoch: int,
                   partition: TopicPartition) -> Transaction:
    """KIP-890 part 1, at the partition: a transactional batch is taken only from the current epoch, for a
    partition added to the ongoing transaction (a late batch of an ended one would hang the partition)."""
    if current is None or current.state is TxnState.DEAD or current.producer_id != producer_id:
        raise InvalidProducerIdMapping(f"producer id {producer_id} has no transaction")
    if producer_epoch != current.producer_epoch:
        raise InvalidProducerEpoch(f"producer {producer_id}: epoch {producer_epoch} is not the current "
                                   f"{current.producer_epoch}")
    if current.state is not TxnState.ONGOING or partition not in current.partitions:
        raise InvalidTxnState(f"producer {producer_id}: {partition[0]}-{partition[1]} is not part of an "
                              f"ongoing transaction (state {current.state.value}); AddPartitionsToTxn first")
    return current


def end_txn(current: Transaction | None, producer_id: int, producer_epoch: int, commit: bool,
            now_ms: int) -> Transaction:
    """EndTxn: the decision, PrepareCommit or PrepareAbort (the caller completes it). A retry of an EndTxn
    whose transaction already completed with the same outcome is answered again, unchanged."""
    txn = check_producer(current, producer_id, producer_epoch)
    wanted = "commit" if commit else "abort"
    done, preparing = ((TxnState.COMPLETE_COMMIT, TxnState.PREPARE_COMMIT) if commit
                       else (TxnState.COMPLETE_ABORT, TxnState.PREPARE_ABORT))
    if txn.state is TxnState.ONGOING:
        return replace(txn, state=preparing, updated_ms=now_ms)
    if txn.state is done:
        return txn
    if txn.state is preparing:
        raise ConcurrentTransactions(f"transactional id {txn.transactional_id!r}: the {wanted} is completing")
    raise InvalidTxnState(f"transactional id {txn.transactional_id!r}: cannot {wanted} in state {txn.state.value}")


def complete(current: Transaction, now_ms: int) -> Transaction:
    """Every table and the group offsets hold the outcome: the transaction is over."""
    if current.state is TxnState.PREPARE_COMMIT:
        state = TxnState.COMPLETE_COMMIT
    elif current.state is TxnState.PREPARE_ABORT:
        state = TxnState.COMPLETE_ABORT
    else:
        raise InvalidTxnState(f"transactional id {current.transactional_id!r}: nothing to complete in state "
                              f"{current.state.value}")
    return replace(current, state=state, updated_ms=now_ms, started_ms=-1, partitions=frozenset(),
                   groups=frozenset(), offsets=())


def timed_out(current: Transaction, now_ms: int) -> bool:
    return current.state is TxnState.ONGOING and now_ms - current.started_ms >= current.timeout_ms


def expire(current: Transaction, now_ms: int) -> Transaction | None:
    """transaction.timeout.ms: an ongoing transaction gone quiet is aborted, its producer fenced (epoch
    bumped); None when it has not timed out."""
    return _abort_fencing(current, now_ms) if timed_out(current, now_ms) else None


def expire_id(current: Transaction, now_ms: int, expiration_ms: int = DEFAULT_ID_EXPIRATION_MS) -> Transaction | None:
    """transactional.id.expiration.ms: an idle id unused that long is forgotten (Dead); None otherwise."""
    if current.state.idle and now_ms - current.updated_ms >= expiration_ms:
        return replace(current, state=TxnState.DEAD, updated_ms=now_ms)
    return None
