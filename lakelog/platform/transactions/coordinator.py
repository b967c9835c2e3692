"""The transaction coordinator of one node: the state machine (state.py) around its I/O.

Each transactional id's calls run one at a time under that id's lock, their new state stored (store.py)
before they are answered. A transactional batch is staged (staging.py) and its offsets reserved in the
topic's log under the same lock, so it cannot race the EndTxn of its transaction on this node. Ending a
transaction: the decision (PrepareCommit / PrepareAbort) is stored first, then every partition is filled
(log/reservations.py), the group offsets of a commit written, and CompleteCommit / CompleteAbort stored. A
transaction found prepared (at start, or left by a failed completion) is rolled forward by the reaper,
which also aborts transactions past their `transaction.timeout.ms`.
"""

from __future__ import annotations

import logging
import secrets
import threading
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Callable, Iterator

import pyarrow as pa

from lakelog.platform.clock import now_ms
from lakelog.platform.cluster.errors import NotCoordinator
from lakelog.platform.cluster.membership import Membership, owns_key
from lakelog.platform.cluster.ownership import transaction_key
from lakelog.platform.deadline import Deadline
from lakelog.platform.errors import LakelogError, UnknownTopicOrPartition
from lakelog.platform.groups.offsets import CommittedOffset, OffsetRow
from lakelog.platform.log.reservations import TransactionEnded
from lakelog.platform.storage import Storage
from lakelog.platform.transactions import state
from lakelog.platform.transactions.errors import InvalidTxnState, TransactionCoordinatorFenced
from lakelog.platform.transactions.handover import Handover
from lakelog.platform.transactions.staging import Staging
from lakelog.platform.transactions.state import PendingOffset, TopicPartition, Transaction, TxnState
from lakelog.platform.transactions.store import TransactionStore
from lakelog.platform.transactions.store_compaction import MIN_ROWS

log = logging.getLogger(__name__)

COMPLETION_TIMEOUT_MS = 30_000
PRODUCER_ID_BITS = 40  # Kafka producer ids are drawn at random below 2^40 (as for idempotent producers)


class TransactionCoordinator:
    def __init__(self, storage: Storage, topic_log: Callable, commit_offsets: Callable[[list[OffsetRow]], Future],
                 committed: Callable[[str], dict[TopicPartition, CommittedOffset]],
                 new_producer_id: Callable[[], int] = lambda: secrets.randbits(PRODUCER_ID_BITS - 1) + 1,
                 max_timeout_ms: int = state.DEFAULT_MAX_TIMEOUT_MS,
                 id_expiration_ms: int = state.DEFAULT_ID_EXPIRATION_MS, reap_interval_s: float = 1.0,
                 clock: Callable[[], int] = now_ms, owns: Callable[[str], bool] = lambda _: True,
                 reload_group: Callable[[str], None] = lambda _: None, handover: Handover | None = None,
                 compact_min_rows: int = MIN_ROWS) -> None:
        self._topic_log = topic_log  # (topic) -> TopicLog
        self._commit_offsets = commit_offsets
        self._committed = committed
        self._new_producer_id = new_producer_id
        self._max_timeout_ms = max_timeout_ms
        self._id_expiration_ms = id_expiration_ms
        self._clock = clock
        self._store = TransactionStore(storage, compact_min_rows=compact_min_rows)
        self._staging = Staging(storage)
        self._lock = threading.Lock()  # guards the two dicts; each id's calls hold its own lock
        self._reload_lock = threading.Lock()  # one read of the stored states at a time (_reload)
        # The cluster's hand-over of ids between nodes (handover.py): an id is acted on only once released.
        self._handover = handover if handover is not None else Handover()
        self._in_view = owns
        self._txns: dict[str, Transaction] = self._store.load()
        # Ids whose state here is the stored one (read since owned): id -> the hand-over's generation then.
        self._fresh: dict[str, int] = dict.fromkeys(self._txns, self._handover.generation)
        self._reload_group = reload_group  # a group's offsets read again (another node wrote them)
        # Offsets staged here for transactions another node coordinates: (id, number) -> their groups.
        self._pending: dict[tuple[str, int], set[str]] = {}
        self._id_locks: dict[str, threading.Lock] = {}
        self._closed = threading.Event()
        self._interval_s = reap_interval_s
        self._reaper = threading.Thread(target=self._reap_loop, name="lakelog-txn-reaper", daemon=True)
        self._reaper.start()

    # ---- the calls --------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int,
                         expected: tuple[int, int] = (state.NO_PRODUCER_ID, state.NO_EPOCH)) -> Transaction:
        with self._acting(transactional_id):
            for _ in range(3):
                current = self._current(transactional_id)
                if current is not None and current.state.preparing:
                    self._finish(current)  # a decided transaction is completed before the id moves on
                    continue
                new = self._save(state.init_producer_id(current, transactional_id, timeout_ms, self._clock(),
                                                        self._new_producer_id(), expected, self._max_timeout_ms))
                if new.state.preparing:  # an ongoing transaction, aborted to fence its producer
                    self._finish(new)
                    continue
                return new
        raise InvalidTxnState(f"transactional id {transactional_id!r}: InitProducerId did not settle")

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: frozenset[TopicPartition]) -> Transaction:
        with self._acting(transactional_id):
            current = self._current(transactional_id)
            new = state.add_partitions(current, producer_id, epoch, partitions, self._clock())
            return self._save_if_changed(current, new)

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group: str) -> Transaction:
        with self._acting(transactional_id):
            current = self._current(transactional_id)
            return self._save_if_changed(current, state.add_offsets(current, producer_id, epoch, group, self._clock()))

    def txn_offset_commit(self, transactional_id: str, producer_id: int, epoch: int,
                          offsets: tuple[PendingOffset, ...]) -> Transaction:
        with self._acting(transactional_id):
            current = self._current(transactional_id)
            new = state.txn_offset_commit(current, producer_id, epoch, offsets, self._clock())
            return self._save_if_changed(current, new)

    def stage_offsets(self, transactional_id: str, producer_id: int, epoch: int,
                      offsets: tuple[PendingOffset, ...]) -> None:
        """TxnOffsetCommit on the group's coordinator when another node coordinates the id: checked on the
        stored state, staged on the root for the id's coordinator to write when the transaction commits;
        this node reads the group's offsets again once the transaction is over.

        Checked again once staged: the coordinator stores its decision before it reads the staged offsets,
        so a staging still Ongoing after its write is read by the completion; one that lands later (a late
        or retried request) is refused, never taken as committed."""
        with self._id_lock(transactional_id):
            txn = self._stored_offset_commit(transactional_id, producer_id, epoch, offsets)
            for group in sorted({o.group for o in offsets}):
                self._staging.stage_offsets(producer_id, txn.number, group, [o for o in offsets if o.group == group])
            with self._lock:
                self._pending.setdefault((transactional_id, txn.number), set()).update(o.group for o in offsets)
            after = self._stored_offset_commit(transactional_id, producer_id, epoch, offsets)
            if after.number != txn.number:
                raise InvalidTxnState(f"transactional id {transactional_id!r}: transaction {txn.number} ended "
                                      "while its offsets were staged")

    def _stored_offset_commit(self, transactional_id: str, producer_id: int, epoch: int,
                              offsets: tuple[PendingOffset, ...]) -> Transaction:
        self._reload(only_if_changed=True)  # the stored state is the coordinator's: its number is the key
        return state.txn_offset_commit(self._current(transactional_id), producer_id, epoch, offsets, 0)

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> Transaction:
        """Answered once the outcome is in every table and the group offsets (a failure after the decision
        is stored is rolled forward by the reaper, and the client's retry is answered then)."""
        with self._acting(transactional_id):
            current = self._current(transactional_id)
            new = state.end_txn(current, producer_id, epoch, commit, self._clock())
            if new is current:
                return current  # a retry of an EndTxn whose transaction completed
            return self._finish(self._save(new))

    def produce(self, transactional_id: str, producer_id: int, epoch: int, topic: str, partition: int,
                sequence: int, records: pa.Table, timeout_ms: int) -> int:
        """Stage a transactional batch (TOPIC_FILE_SCHEMA, stamped) and reserve its offsets: the first."""
        deadline = Deadline.after_ms(timeout_ms)
        with self._id_lock(transactional_id):
            for retry in (True, False):
                txn = self._verified(transactional_id, producer_id, epoch, (topic, partition))
                self._staging.stage(topic, partition, producer_id, txn.number, sequence, records)
                try:
                    return self._topic_log(topic).reserve(partition, records.num_rows, producer_id, txn.number,
                                                          sequence, deadline)
                except TransactionEnded as exc:
                    self._staging.unstage(topic, partition, producer_id, txn.number, sequence, records.num_rows)
                    if not retry or self.owns(transactional_id):
                        raise InvalidTxnState(str(exc)) from None
                    self._reload()  # judged on an old state here: the stored one may be a later transaction
        raise AssertionError("unreachable")

    def _verified(self, transactional_id: str, producer_id: int, epoch: int, partition: TopicPartition) -> Transaction:
        """KIP-890's check of a batch. On a node that does not coordinate the id (its topic's leader in a
        cluster) the state held here may be old: a refusal is judged again on the stored state. A batch let
        through on an old state is still safe: its reservation is refused once its transaction ended in the
        partition, and a fill finds every reservation made before it (log/reservations.py)."""
        try:
            return state.verify_produce(self._current(transactional_id), producer_id, epoch, partition)
        except LakelogError:
            if self.owns(transactional_id):
                raise
        self._reload()
        return state.verify_produce(self._current(transactional_id), producer_id, epoch, partition)

    def _reload(self, only_if_changed: bool = False) -> None:
        """Every id's stored state (another node coordinates some, or took them over), or only when another
        node wrote since. One read at a time: the store knows the version read before the states read at
        it are held here, so a caller finding the table unchanged while a read was under way would act on
        the states that read replaces (ci51: offsets staged under the transaction before the current one),
        and an older read ending last would undo a newer one."""
        with self._reload_lock:
            if only_if_changed and not self._store.changed_elsewhere():
                return
            loaded = self._store.load()
            # An id this node coordinates and holds fresh it alone writes: a read racing its save may be older.
            held = {t for t in loaded if t in self._fresh and self.owns(t)}
            with self._lock:
                for transactional_id, txn in loaded.items():
                    if transactional_id not in held or transactional_id not in self._txns:
                        self._txns[transactional_id] = txn

    def owns(self, transactional_id: str) -> bool:
        """Whether this node coordinates the id now: it owns it in its view of the cluster, and the hand-over
        let it act on it (not lost, not waiting for the previous owner to let go)."""
        return self._in_view(transactional_id) and self._handover.serving(transactional_id)

    @contextmanager
    def _acting(self, transactional_id: str) -> Iterator[None]:
        """Under the id's lock, for an id this node coordinates (else NOT_COORDINATOR): a view change that
        moves the id away waits for this to end before the node publishes it let go."""
        self._check_coordinating(transactional_id)  # refused at once, not after a call in progress ends
        with self._id_lock(transactional_id), self._handover.acting(transactional_id):
            if not self._in_view(transactional_id):
                raise NotCoordinator(f"transactional id {transactional_id!r} is coordinated by another node")
            yield

    def describe(self, transactional_id: str) -> Transaction | None:
        with self._lock:
            return self._txns.get(transactional_id)

    def transactions(self) -> list[Transaction]:
        with self._lock:
            return list(self._txns.values())

    def close(self) -> None:
        self._closed.set()
        self._handover.close()
        self._reaper.join(timeout=5)

    # ---- completion -------------------------------------------------------------------

    def _finish(self, txn: Transaction) -> Transaction:
        """Write a decided transaction's outcome everywhere, then mark it complete. Every step is
        idempotent: a roll-forward repeats them all."""
        commit = txn.state is TxnState.PREPARE_COMMIT
        deadline = Deadline.after_ms(COMPLETION_TIMEOUT_MS)
        for topic, partition in sorted(txn.partitions):
            self._check_coordinating(txn.transactional_id)  # lost meanwhile: the new owner completes it
            try:
                topic_log = self._topic_log(topic)
            except UnknownTopicOrPartition:
                continue  # deleted meanwhile: nothing of it to fill
            topic_log.refresh()

            def staged(topic: str = topic, partition: int = partition) -> list:
                return self._staging.batches(topic, partition, txn.producer_id, txn.number, commit)

            topic_log.fill(partition, txn.producer_id, txn.number, staged, deadline, txn.producer_id, commit)
        if commit and txn.groups:
            self._write_offsets(txn, self._staging.staged_offsets(txn.producer_id, txn.number, txn.groups))
        done = self._save(state.complete(txn, self._clock()))
        for topic, partition in txn.partitions:
            try:
                self._staging.discard(topic, partition, txn.producer_id, txn.number)
            except OSError as exc:  # left for a later cleanup; never read again (the fill is done)
                log.warning("staged records of %s-%d not deleted: %s", topic, partition, exc)
        if txn.groups:
            try:
                self._staging.discard_offsets(txn.producer_id, txn.number)
            except OSError as exc:
                log.warning("staged offsets of %r not deleted: %s", txn.transactional_id, exc)
        log.info("transaction %d of %r %s", txn.number, txn.transactional_id,
                 "committed" if commit else "aborted")
        return done

    def _write_offsets(self, txn: Transaction, staged: list[PendingOffset]) -> None:
        """The transaction's group offsets (held here, and staged by the groups' coordinators), each unless
        the group committed that partition after the decision (a roll-forward must not undo a later
        commit)."""
        offsets = list({(o.group, o.topic, o.partition): o for o in (*txn.offsets, *staged)}.values())
        rows = []
        for group in sorted({o.group for o in offsets}):
            try:
                later = self._committed(group)
            except LakelogError:
                later = {}
            for o in offsets:
                known = later.get((o.topic, o.partition))
                if o.group == group and (known is None or known.committed_ms <= txn.updated_ms):
                    rows.append(OffsetRow(o.group, o.topic, o.partition, o.offset, o.metadata))
        if rows:
            self._commit_offsets(rows).result(timeout=COMPLETION_TIMEOUT_MS / 1000)

    def _reap_loop(self) -> None:
        while not self._closed.wait(self._interval_s):
            self.tick()

    def tick(self) -> None:
        """Roll prepared transactions forward and abort the ones past their timeout (of the ids this node
        coordinates; states other nodes stored are read first)."""
        try:
            self._reload(only_if_changed=True)
        except Exception:
            log.exception("transactions' state not read; retried")
        self._settle_pending()
        try:
            self._store.compact_if_due()
        except Exception:
            log.exception("transactions' state not compacted; retried")
        now = self._clock()
        for txn in self.transactions():
            if not self.owns(txn.transactional_id):
                with self._lock:
                    self._fresh.pop(txn.transactional_id, None)  # read again if it comes back
                continue
            if txn.state.idle and state.expire_id(txn, now, self._id_expiration_ms) is not None:
                self._forget_if_idle(txn.transactional_id)
                continue
            if not (txn.state.preparing or state.timed_out(txn, now)):
                continue
            try:
                with self._acting(txn.transactional_id):
                    current = self._current(txn.transactional_id)
                    if current is None:
                        continue
                    if not current.state.preparing:
                        expired = state.expire(current, self._clock())
                        if expired is None:
                            continue
                        log.warning("transaction %d of %r timed out after %d ms: aborting it",
                                    current.number, current.transactional_id, current.timeout_ms)
                        current = self._save(expired)
                    self._finish(current)
            except NotCoordinator:
                continue  # moved away meanwhile: its new coordinator completes it
            except Exception:
                log.exception("transaction of %r not completed; retried", txn.transactional_id)

    # ---- state ------------------------------------------------------------------------

    def _settle_pending(self) -> None:
        """Groups whose offsets were staged here for a transaction now over (committed: its coordinator
        wrote them; aborted: nothing to write) are read again from the table."""
        with self._lock:
            pending = list(self._pending.items())
        for (transactional_id, number), groups in pending:
            current = self._current(transactional_id)
            if current is not None and (current.number > number or (current.number == number and current.state.idle)
                                        or current.state is TxnState.DEAD):
                try:
                    for group in sorted(groups):
                        self._reload_group(group)
                except Exception:
                    log.exception("offsets of %s not read again; retried", sorted(groups))
                    continue
                with self._lock:
                    self._pending.pop((transactional_id, number), None)

    def _forget_if_idle(self, transactional_id: str) -> None:
        """transactional.id.expiration.ms: an id idle that long is stored Dead (its next producer starts over)."""
        try:
            with self._acting(transactional_id):
                current = self._current(transactional_id)
                dead = None if current is None else state.expire_id(current, self._clock(), self._id_expiration_ms)
                if dead is not None:
                    self._save(dead)
        except NotCoordinator:
            pass
        except Exception:
            log.exception("transactional id %r not expired; retried", transactional_id)

    def _id_lock(self, transactional_id: str) -> threading.Lock:
        with self._lock:
            return self._id_locks.setdefault(transactional_id, threading.Lock())

    def _current(self, transactional_id: str) -> Transaction | None:
        """The id's state; read from the root first when this node did not hold it since it took the id
        over (another node changed it meanwhile). A node that does not coordinate the id answers what it
        read last (its callers judge a refusal again on the stored state)."""
        owned = self.owns(transactional_id)
        generation = self._handover.generation
        with self._lock:
            read_at = self._fresh.get(transactional_id)
            if owned and read_at is not None and not self._handover.taken_since(transactional_id, read_at):
                return self._txns.get(transactional_id)
            self._fresh.pop(transactional_id, None)  # read again once this node (again) takes it over
            if not owned and transactional_id in self._txns:
                return self._txns[transactional_id]
        self._reload()
        with self._lock:
            if owned:
                self._fresh[transactional_id] = generation
            return self._txns.get(transactional_id)

    def _check_coordinating(self, transactional_id: str) -> None:
        if not self.owns(transactional_id):
            log.info("transactional id %r moved to another node: its state is not stored here", transactional_id)
            raise NotCoordinator(f"transactional id {transactional_id!r} moved to another node")

    def _save(self, txn: Transaction) -> Transaction:
        """Store the id's new state, only while this node coordinates the id (a node that lost it stores
        nothing more: its rows never interleave with the new owner's), and only if it was made from the
        id's latest stored state (the store's compare-and-set: a node that did not see it move away, and
        back, is refused too). Returns the state as stored."""
        self._check_coordinating(txn.transactional_id)
        try:
            saved = self._store.save(txn)
        except TransactionCoordinatorFenced as exc:
            with self._lock:
                self._fresh.pop(txn.transactional_id, None)  # read again before this node acts on it next
            log.warning("%s: refused; the client asks FindCoordinator again", exc)
            raise NotCoordinator(str(exc)) from None
        with self._lock:
            self._txns[txn.transactional_id] = saved
        return saved

    def _save_if_changed(self, current: Transaction | None, new: Transaction) -> Transaction:
        return self._save(new) if new != current else new


def cluster_owner(cluster: Membership | None) -> Callable[[str], bool]:
    """Whether this node coordinates a transactional id now: rendezvous ownership of `txn:<id>` over the
    live nodes (always, alone; never without a fresh view of the cluster)."""
    return lambda transactional_id: owns_key(cluster, transaction_key(transactional_id))
