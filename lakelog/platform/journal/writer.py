"""The node journal's writer: produce calls of every topic a node leads, group-committed into one journal
object per flush, acknowledged once that object is durable (docs/architecture.md, "The node journal").

A flush (group_commit.py: `linger.ms` after its first call, or `batch.bytes`) admits each topic's calls as
the topic writer does (bad records, idempotent retries, fenced producers), stamps them, assigns offsets
after the topic's acknowledged ones, and writes `_journal/gens/<node>/<run>/<slot>` with put-if-absent, one
put in flight. Landed: every call is answered with its offsets and the records are served from memory
until the committer (committer.py) puts them into the topic tables. "Exists": the slot's bytes are read;
ours (an earlier attempt landed) is success, anything else a fence. Storage errors retry the same slot
with the same bytes until the flush's deadline; then the writer fences that slot itself (if its put had
landed after all, the fence loses and the object counts) and opens a new generation: a slot is never
skipped and offsets of a put that may land are never handed out again. Before a topic's first offsets
in a generation the writer claims the topic's epoch (claims.py): whoever held it is fenced and replayed.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from lakelog.platform.clock import now_ms
from lakelog.platform.deadline import Deadline
from lakelog.platform.errors import LakelogError, StorageUnavailable
from lakelog.platform.journal.claims import latest_epoch, take_over
from lakelog.platform.journal.errors import JournalFenced
from lakelog.platform.journal.objects import (
    FENCE,
    TOMBSTONE,
    Entry,
    encode_marker,
    encode_records,
    generation_path,
    slot_name,
)
from lakelog.platform.journal.pacing import CommitPacer
from lakelog.platform.journal.planner import deletable_slots
from lakelog.platform.journal.topic_state import Acknowledged, JournalTopic
from lakelog.platform.log.commit import assign_offsets, partition_runs
from lakelog.platform.produce.admission import PendingProduce, checked_together
from lakelog.platform.produce.group_commit import GroupCommit, fail, succeed
from lakelog.platform.produce.record_checks import int64_values
from lakelog.platform.records import ProduceResult, stamp
from lakelog.platform.storage import STORAGE_ERRORS, Storage, is_retriable
from lakelog.schemas import TOPIC_SCHEMA

if TYPE_CHECKING:
    from lakelog.platform.broker.open_topic import OpenTopic

log = logging.getLogger(__name__)

BEHIND_FACTOR = 4  # a topic takes no more calls once this many table.commit.bytes wait for its table commit
OFFSET_FIELD = TOPIC_SCHEMA.field("offset")
RETRY_S = 0.05  # first pause between attempts at one slot (doubling, up to a second)


@dataclass
class JournalCall:
    opened: OpenTopic
    pending: PendingProduce

    @property
    def future(self) -> Future:
        return self.pending.future


@dataclass
class _Prepared:
    """One topic's part of a flush: its admitted calls and their records at their offsets."""

    opened: OpenTopic
    accepted: list[PendingProduce]
    results: list[ProduceResult]
    items: list[Acknowledged]
    records: pa.Table  # TOPIC_SCHEMA, sorted by partition then offset
    entries: list[Entry]  # of `records`


def refuse(pending: PendingProduce, error: BaseException) -> None:
    """Answer the call with `error`; one that met a fence (nothing of its flush landed) goes again instead
    (`PendingProduce.resend`), as the client's retry would, until its deadline."""
    if isinstance(error, JournalFenced) and pending.resend is not None and not pending.deadline.passed():
        pending.resend(pending)
    else:
        fail(pending.future, error)


class JournalWriter:
    def __init__(self, storage: Storage, node: str, linger_ms: int, batch_bytes: int,
                 committed: threading.Condition, put_rate: float = 0) -> None:
        """`put_rate`: journal puts a second at most on object storage (pacing.py; a local folder's are not
        paced)."""
        self.storage = storage
        self.node = node
        self.committed = committed
        self.puts = 0  # journal objects written (landed)
        self._lock = threading.Lock()  # guards the fields below
        self._outstanding: dict[str, dict[int, int]] = {}  # run -> slot -> entries not yet committed
        self._highest: dict[str, int] = {}  # run -> its highest landed slot
        self._topics: dict[str, OpenTopic] = {}  # topics with acknowledged entries, for the committer
        self.settled: frozenset[str] = frozenset()  # the node's generations its start settled (recovery.py)
        self._open_generation()
        pacer = CommitPacer(put_rate) if put_rate > 0 and not storage.is_local else None
        self._flushes = GroupCommit(f"journal-{node}", self._flush, linger_ms, batch_bytes,
                                    lambda call: call.pending.nbytes, pacer)

    def _open_generation(self) -> None:
        self.run = uuid.uuid4().hex[:16]
        self.slot = 0
        self.storage.makedirs(self.storage.uri(generation_path(self.node, self.run)))
        log.info("journal of node %s: generation %s opened", self.node, self.run)

    def slot_uri(self, run: str, slot: int) -> str:
        return self.storage.uri(generation_path(self.node, run), slot_name(slot))

    # ---- the produce side --------------------------------------------------

    def submit(self, opened: OpenTopic, pending: PendingProduce) -> Future:
        self._flushes.submit(JournalCall(opened, pending))
        return pending.future

    def expire(self, now: float) -> None:
        """Answer callers whose deadline passed: REQUEST_TIMED_OUT, the outcome unknown (a call in the flush
        in flight may still become durable, as with Kafka's request timeout; its offsets are then kept)."""
        for call in self._flushes.waiting():
            if call.pending.deadline.passed(now) and not call.future.done():
                fail(call.future, call.pending.deadline.timed_out("no journal write", written=None))

    def drain(self) -> None:
        self._flushes.drain()

    def close(self, timeout: float | None = None) -> None:
        self._flushes.close(timeout)

    def _flush(self, calls: list[JournalCall]) -> None:
        by_topic: dict[str, list[JournalCall]] = {}
        for call in calls:
            if not call.future.done():
                by_topic.setdefault(call.opened.meta.name, []).append(call)
        held: list[JournalTopic] = []
        try:
            prepared = []
            for topic_calls in by_topic.values():
                state = topic_calls[0].opened.journal
                state.lock.acquire()  # held until decided: no exactly-once append sees offsets in flight
                held.append(state)
                if state.retired is not None:
                    for call in topic_calls:
                        refuse(call.pending, state.retired)
                    continue
                if not self._claim(topic_calls[0].opened, state, [c.pending for c in topic_calls]):
                    continue
                part = self._prepare(topic_calls[0].opened, state, [c.pending for c in topic_calls])
                if part is not None:
                    prepared.append(part)
            if prepared:
                self._write(prepared)
        finally:
            for state in held:
                state.lock.release()

    def _claim(self, opened: OpenTopic, state: JournalTopic, calls: list[PendingProduce]) -> bool:
        """`claim`, or the calls answered with its error."""
        try:
            self.claim(opened, state)
        except (LakelogError, *STORAGE_ERRORS) as exc:
            log.warning("journal: %s not claimed by %s/%s: %s", opened.meta.name, self.node, self.run, exc)
            error = exc if isinstance(exc, LakelogError) else StorageUnavailable(f"claim of the topic failed: {exc}")
            for pending in calls:
                fail(pending.future, error)
            return False
        return True

    def claim(self, opened: OpenTopic, state: JournalTopic) -> None:
        """The topic's epoch for this generation before any offset is assigned or any direct table commit is
        made (claims.py). Called with `state.lock` held."""
        if state.claimed_by == self.run:
            return
        take_over(self.storage, opened, self.node, self.run, self.settled)
        state.claimed(self.run)
        # Other writers' batches may be in the table now: their producers' state is read from it again.
        opened.producers.forget_changed(opened.log.take_changed_producers())

    def hold(self, opened: OpenTopic, state: JournalTopic) -> None:
        """`claim`, checked on the store: a generation meets another's fence only at its next put, so until
        then `claimed_by` may name a topic another generation took since (and acknowledged records of). If
        one did, the topic is taken back (fence, replay). Called with `state.lock` held."""
        if self.holds(opened.meta.name):
            return
        state.claimed_by = None
        self.claim(opened, state)

    def holds(self, topic: str) -> bool:
        """This generation holds the topic's latest epoch, as the store says now (one LIST, one GET)."""
        current = latest_epoch(self.storage, topic)
        return current is not None and (current.node, current.run) == (self.node, self.run)

    def _catch_up(self, opened: OpenTopic, state: JournalTopic) -> None:
        """A sequence gap or a fenced producer epoch: another generation may have taken the topic and
        acknowledged the producer's later batches. If so, take the topic back (fence, replay: the producer
        state then reads those batches); while the epoch is still this generation's the refusal stands.
        Called with `state.lock` held."""
        try:
            self.hold(opened, state)
        except (LakelogError, *STORAGE_ERRORS) as exc:
            log.warning("journal: %s not checked for a takeover: %s", opened.meta.name, exc)

    def _prepare(self, opened: OpenTopic, state: JournalTopic, calls: list[PendingProduce]) -> _Prepared | None:
        calls, together = checked_together(opened.admission.served(calls), opened.meta.name)
        accepted = opened.admission.admit(calls, lambda: self._catch_up(opened, state))
        if accepted and state.pending_bytes >= BEHIND_FACTOR * opened.meta.config.table_commit_bytes:
            # The table commits are not keeping up (storage refusing them): stop taking more into memory.
            log.warning("produce to %s refused: %d bytes wait for its table commit", opened.meta.name,
                        state.pending_bytes)
            for pending in accepted:
                fail(pending.future, StorageUnavailable(
                    f"{opened.meta.name!r}: {state.pending_bytes} acknowledged bytes wait for their table "
                    "commit; retry"))
            return None
        if not accepted:
            return None
        table = together if together is not None and len(accepted) == len(calls) else (
            pa.concat_tables([p.table for p in accepted]) if len(accepted) > 1 else accepted[0].table)
        partitions = np.concatenate([p.partitions for p in accepted])
        table = stamp(table, [p.stamp for p in accepted], now_ms())
        if len(partitions) < 2 or bool((partitions[1:] >= partitions[:-1]).all()):  # one partition, commonly
            runs = partition_runs(partitions)
            bases = {p: state.next_offset(p) for p, _, _ in runs}
            records, in_given_order = assign_offsets(table, runs, bases)
        else:
            order = np.argsort(partitions, kind="stable")
            runs = partition_runs(partitions[order])
            bases = {p: state.next_offset(p) for p, _, _ in runs}
            records, offsets = assign_offsets(table.take(order), runs, bases)
            in_given_order = np.empty_like(offsets)
            in_given_order[order] = offsets
        at = records.schema.get_field_index("offset")
        records = records.set_column(at, OFFSET_FIELD, records.column(at))  # TOPIC_SCHEMA's field (not null)
        timestamps = int64_values(table.column("timestamp"))
        results, start = [], 0
        for pending in accepted:
            end = start + pending.rows
            results.append(ProduceResult(partitions[start:end], in_given_order[start:end], timestamps[start:end]))
            start = end
        # assign_offsets gave each run dense offsets from its base (entries_of would find the same, slower)
        entries = [Entry(opened.meta.name, p, int(bases[p]), hi - lo) for p, lo, hi in runs]
        size = records.get_total_buffer_size()  # one contiguous table: its buffers are its records
        items = [Acknowledged(("", 0), entry, records.slice(lo, hi - lo), size * (hi - lo) // len(records))
                 for entry, (_, lo, hi) in zip(entries, runs)]
        return _Prepared(opened, accepted, results, items, records, entries)

    def _write(self, prepared: list[_Prepared]) -> None:
        run, slot = self.run, self.slot
        data = encode_records(self.node, run, slot, {p.opened.meta.name: p.records for p in prepared},
                              {p.opened.meta.name: p.entries for p in prepared})
        deadline = Deadline.earliest([c.deadline for p in prepared for c in p.accepted])
        landed = self._put(run, slot, data, deadline)
        if landed is not True:
            error = landed if landed is not False else JournalFenced(
                f"journal generation {run} of node {self.node} was fenced at slot {slot}: not acknowledged")
            try:
                self._open_generation()  # before the callers hear of it: their retries go to the new one
            finally:
                for part in prepared:
                    for pending in part.accepted:
                        refuse(pending, error)
            return
        self.puts += 1
        self.slot = slot + 1
        with self._lock:
            self._outstanding.setdefault(run, {})[slot] = sum(len(p.items) for p in prepared)
            self._highest[run] = slot
            for part in prepared:
                self._topics[part.opened.meta.name] = part.opened
        for part in prepared:
            items = [Acknowledged((run, slot), i.entry, i.records, i.known_nbytes) for i in part.items]
            part.opened.journal.acknowledged(items)
            part.opened.admission.record_producers(part.accepted, part.results)
            for pending, result in zip(part.accepted, part.results):
                succeed(pending.future, result)
        with self.committed:
            self.committed.notify_all()

    def _put(self, run: str, slot: int, data: bytes, deadline: Deadline) -> bool | Exception:
        """True: the object is durable at the slot (ours); False: the slot holds another's (a fence); an
        error: given up at the deadline and the slot fenced by this writer (nothing acknowledged)."""
        uri, pause = self.slot_uri(run, slot), RETRY_S
        while True:
            try:
                if self.storage.put_if_absent(uri, data):
                    return True
                return self.storage.read_bytes(uri) == data
            except STORAGE_ERRORS as exc:
                if not is_retriable(exc) or deadline.passed():
                    log.warning("journal write of slot %d (generation %s) given up: %s", slot, run, exc)
                    return self._self_fence(uri, run, slot, data, exc)
                log.warning("journal write of slot %d (generation %s) failed, retrying: %s", slot, run, exc)
            time.sleep(min(pause, max(deadline.remaining_s(), 0.001)))
            pause = min(pause * 2, 1.0)

    def _self_fence(self, uri: str, run: str, slot: int, data: bytes, cause: Exception) -> bool | Exception:
        """Take the slot given up on with a fence, so a put of ours still in flight cannot land later; if it
        had landed, the fence loses and the object counts as written."""
        fence, pause = encode_marker(FENCE, self.node, run, slot), RETRY_S
        while True:
            try:
                if self.storage.put_if_absent(uri, fence):
                    return Deadline(0).timed_out(f"journal write failed ({cause}); nothing acknowledged",
                                                 written=False)
                return self.storage.read_bytes(uri) == data
            except STORAGE_ERRORS as exc:  # the slot must be decided before anything else is written
                log.warning("fence of slot %d (generation %s) failed, retrying: %s", slot, run, exc)
                time.sleep(pause)
                pause = min(pause * 2, 5.0)

    # ---- the committer's side -----------------------------------------------

    def topics_with_entries(self) -> list[OpenTopic]:
        with self._lock:
            return list(self._topics.values())

    def committed_entries(self, items: list[Acknowledged]) -> None:
        """Entries now in their table: journal objects whose entries are all there are deleted, in slot
        order, but a generation's highest slot (kept while it may still write)."""
        with self._lock:
            for item in items:
                run, slot = item.generation
                slots = self._outstanding.get(run)
                if slots is not None and slot in slots:
                    slots[slot] -= 1
            doomed: list[str] = []
            for run, slots in self._outstanding.items():
                gone = deletable_slots(slots, self._highest.get(run))
                for slot in gone:
                    del slots[slot]
                doomed.extend(self.slot_uri(run, slot) for slot in gone)
        if doomed:
            try:
                self.storage.delete_files(doomed)
            except STORAGE_ERRORS as exc:  # left for the next start's replay to find committed and delete
                log.warning("journal objects not deleted: %s", exc)

    def seal(self) -> None:
        """At a clean stop, everything committed: the generation's last object becomes a tombstone (the next
        start then reads no records of it)."""
        with self._lock:
            slots = self._outstanding.get(self.run, {})
            highest = self._highest.get(self.run)
            if highest is None and not slots:
                self._remove_if_empty()
            if highest is None or any(slots.values()):
                return
        try:
            self.storage.write_bytes(self.slot_uri(self.run, highest), encode_marker(TOMBSTONE, self.node, self.run,
                                                                                   highest))
            self.storage.delete_files([self.slot_uri(self.run, s) for s in slots if s != highest])
        except STORAGE_ERRORS as exc:  # the next start finds the entries committed
            log.warning("journal generation %s not sealed: %s", self.run, exc)

    def _remove_if_empty(self) -> None:
        """A generation that never wrote leaves no folder behind (a maintenance job's broker, a node that
        took no produce call): on a local root the empty folder would stay, listed by every later start."""
        folder = self.storage.uri(generation_path(self.node, self.run))
        try:
            if self.storage.is_local and not self.storage.list_names(folder):
                self.storage.delete_tree(folder)
        except STORAGE_ERRORS as exc:
            log.warning("empty journal generation %s not removed: %s", self.run, exc)

    def track(self, opened: OpenTopic) -> None:
        """A topic with acknowledged entries put there other than by a flush (carried over by an election)."""
        with self._lock:
            self._topics[opened.meta.name] = opened

    def forget_topic(self, name: str) -> None:
        with self._lock:
            self._topics.pop(name, None)
