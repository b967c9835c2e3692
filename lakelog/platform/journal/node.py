"""The node journal as a broker uses it: start (probe, replay, then writer and committer), produce, the
exactly-once door, a replica election's hand-over, flush and close. Every broker has one: it is the only
way a record is acknowledged. The journal lives in the node's storage (with replication sites, the control site's,
with the catalog); the topic tables it commits into are each topic's leader site's, and the copies follow
those table commits.
Several nodes (or processes) on one root each claim a topic's epoch before writing it (claims.py).
"""

from __future__ import annotations

import logging
import threading
import uuid
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator, TypeVar

import numpy as np

from lakelog.platform.deadline import Deadline
from lakelog.platform.errors import LakelogError, StorageUnavailable, UnknownTopicOrPartition
from lakelog.platform.journal.claims import epochs_path
from lakelog.platform.journal.committer import TableCommitter
from lakelog.platform.journal.errors import JournalFenced, JournalRefused
from lakelog.platform.journal.objects import JOURNAL
from lakelog.platform.journal.planner import plan_commit
from lakelog.platform.journal.producer_history import journaled_history
from lakelog.platform.journal.recovery import Replayed, replay
from lakelog.platform.journal.table_commit import commit_entries
from lakelog.platform.journal.topic_state import Acknowledged
from lakelog.platform.journal.writer import JournalWriter
from lakelog.platform.log import TopicLog
from lakelog.platform.produce.admission import PendingProduce
from lakelog.platform.records import ProduceResult
from lakelog.platform.replication.errors import ElectionNotAllowed
from lakelog.platform.storage import STORAGE_ERRORS, Storage
from lakelog.settings import CoreSettings

if TYPE_CHECKING:
    from lakelog.platform.broker.open_topic import OpenTopic

log = logging.getLogger(__name__)
T = TypeVar("T")

# The journal folder of a broker given no `journal_node` (embedded: no cluster id; `lakelog serve` passes its own).
EMBEDDED_NODE = "node"


class NodeJournal:
    def __init__(self, storage: Storage, settings: CoreSettings, committed: threading.Condition,
                 open_topic: Callable[[str], OpenTopic | None]) -> None:
        """`open_topic`: a topic's machinery opened apart from the broker's (for the replay; closed after),
        None when the topic does not exist. Replays the node's journal before taking any call."""
        self._carried: dict[str, list[Acknowledged]] = {}  # entries a replica election handed to the next opening
        self.node = settings.journal_node or EMBEDDED_NODE
        probe_create_only(storage)
        self.replayed: Replayed = replay_own(storage, self.node, open_topic)
        self.writer = JournalWriter(storage, self.node, settings.linger_ms, settings.batch_bytes, committed,
                                    settings.journal_put_rate)
        self.writer.settled = self.replayed.settled
        self.committer = TableCommitter(self.writer, rate=settings.journal_table_commit_rate)

    def attach(self, opened: OpenTopic) -> None:
        """Make an opened topic's offsets the journal's (set before its first produce call). Entries a replica
        election carried over (`elect`) continue there: served, and committed to the new leader's table."""
        opened.log.journal_exclusive = lambda: self.exclusive(opened)  # a transaction's reservations
        carried = self._carried.pop(opened.meta.name, [])
        if carried:
            opened.journal.acknowledged(carried)
            self.writer.track(opened)
        # A producer's state rebuilt here counts its batches acknowledged but not yet in the table.
        opened.producers.read_history_from(journaled_history(opened.log.producer_history, opened.journal))

    def submit(self, opened: OpenTopic, pending: PendingProduce) -> Future:
        return self.writer.submit(opened, pending)

    @contextmanager
    def exclusive(self, opened: OpenTopic) -> Iterator[None]:
        """A direct table commit of the topic (an exactly-once append): its acknowledged entries committed
        first, and no journal flush assigns its offsets meanwhile; the offsets are read from the table after."""
        state = opened.journal
        with state.commit_lock, state.lock:  # in the committer's order: commit_lock first
            self.writer.claim(opened, state)  # no other writer assigns the topic's offsets from memory now
            self.committer.commit_topic(opened)
            if state.pending():
                raise StorageUnavailable(f"acknowledged journal entries of {opened.meta.name!r} could not be "
                                         "committed to its table first; retry")
            try:
                yield
            finally:
                state.reset()

    def elect(self, opened: OpenTopic, elect: Callable[[list[Acknowledged]], T], reopen: Callable[[], None]) -> T:
        """A replica election of the topic. Its acknowledged entries are committed to the current leader's
        table where that site answers; `elect` is given those still waiting (after the leader's commits the
        copies may lack and memory still holds, `JournalTopic.unreplicated`) and elects only where they fit
        the new leader's table (at their offsets, none missing before), raising otherwise (nothing changes).
        Elected: they are carried to the topic's next opening (`attach`, after `reopen`) and committed to the
        new leader's table there; calls still bound to this opening are refused (sent again by the broker).
        No flush assigns offsets meanwhile."""
        state = opened.journal
        with state.commit_lock, state.lock:
            try:
                self.committer.commit_topic(opened)
            except (LakelogError, *STORAGE_ERRORS) as exc:
                log.warning("journal entries of %s not committed to its leader before the election: %s",
                            opened.meta.name, exc)
            waiting = state.pending()
            if waiting:  # the leader's commits the copies may lack go first: the entries then fit after them
                waiting = state.unreplicated() + waiting
            elected = elect(waiting)
            state.retired = JournalFenced(f"{opened.meta.name!r} moved to another leader site (a replica "
                                          "election) while the call waited: not acknowledged")
            if waiting:
                log.warning("journal: %d entries of %s carried to its new leader", len(waiting), opened.meta.name)
                self._carried[opened.meta.name] = waiting
                state.drop(waiting)  # not committed: their journal objects stay until the new leader has them
            self.writer.forget_topic(opened.meta.name)
            reopen()
            return elected

    @staticmethod
    def check_fits(site_log: TopicLog, waiting: list[Acknowledged]) -> None:
        """Refuse a leader site whose table the waiting entries do not fit: a commit of the old leader's that
        it lacks (not copied yet) would leave a gap before them, and their offsets cannot move."""
        try:
            ends = {i.entry.partition: site_log.log_end_offset(i.entry.partition) for i in waiting}
        finally:
            site_log.close()
        bad = plan_commit(ends, [i.entry for i in waiting]).misfit
        if bad is not None:
            log.error("election of %s refused: journal entry %s does not fit the site's table", site_log.name, bad)
            raise ElectionNotAllowed(
                f"{site_log.name!r}: records acknowledged on the node journal (from offset {bad.base} of partition "
                f"{bad.partition}) wait for the leader's table, and the chosen site's table ends at "
                f"{ends.get(bad.partition, 0)}: it lacks commits of the old leader. Elect once the old leader "
                "site answers (the entries then go to its table first), or choose a site that holds its commits")

    def replicated_version(self, opened: OpenTopic, result: ProduceResult, deadline: Deadline) -> int:
        """acks=all on a replicated topic: the call's records committed to the leader's table now, by the
        call's deadline (a leader site that stopped answering times the call out then, not a commit's bound
        later); answers the table version that holds them (for the copy to min.insync.replicas sites)."""
        self.committer.commit_topic(opened, deadline)
        for partition in np.unique(result.partitions).tolist():
            if opened.log.log_end_offset(partition) <= int(result.offsets[result.partitions == partition].max()):
                raise StorageUnavailable(f"records of {opened.meta.name!r} acknowledged in the journal are not in "
                                         "its leader's table yet; retry")
        return opened.log.version

    @staticmethod
    def replicated(opened: OpenTopic, version: int) -> None:
        """The in-sync sites hold the topic's leader table up to `version`."""
        opened.journal.replicated(version)

    def commit_topic(self, opened: OpenTopic) -> None:
        """The topic's acknowledged entries committed to its table now (a synchronous produce's wait)."""
        self.committer.commit_topic(opened)

    def take_for_reads(self, opened: OpenTopic) -> None:
        """Before a read past every offset this leader knows is judged (broker/ends.py): the topic's epoch
        held, so the previous holder's acknowledged records are in the table (its takeover's replay). Checked
        on the store (one LIST and one GET while this generation holds it): a generation another took the
        topic from learns it only at its next put, and its ends alone would call the taker's acknowledged
        records out of range (a group's committed offset reset to earliest, ci48)."""
        state = opened.journal
        try:
            if state.claimed_by == self.writer.run and self.writer.holds(opened.meta.name):
                return  # read outside the topic's lock: its flushes are not held up by the requests
            with state.lock:
                self.writer.hold(opened, state)
        except STORAGE_ERRORS as exc:
            raise StorageUnavailable(f"{opened.meta.name!r} could not be taken over before the read: {exc}; "
                                     "retry") from exc

    def forget_topic(self, opened: OpenTopic) -> None:
        """A deleted topic: its entries count as committed (their objects may go)."""
        state = opened.journal
        with state.lock:  # no flush of the topic is deciding: the calls still queued are refused
            state.retired = UnknownTopicOrPartition(f"unknown topic {opened.meta.name!r}: it was deleted")
            items = state.pending()
            state.drop(items)
        self.writer.committed_entries(items)
        self.writer.forget_topic(opened.meta.name)
        try:  # a topic created again under the name starts from no epoch: nothing of this one is replayed into it
            storage, folder = self.writer.storage, self.writer.storage.uri(epochs_path(opened.meta.name))
            if storage.is_local:
                storage.delete_tree(folder)
            else:  # one LIST and one DeleteObjects
                storage.delete_files(storage.list_tree(folder))
        except STORAGE_ERRORS as exc:
            log.warning("epochs of the deleted topic %s not deleted: %s", opened.meta.name, exc)

    def expire(self, now: float) -> None:
        self.writer.expire(now)

    def flush(self) -> None:
        """Every call so far acknowledged, and committed to its table."""
        self.writer.drain()
        self.committer.commit_all()

    def close(self) -> None:
        self.writer.close()
        self.committer.close()
        self.committer.commit_all()
        self.writer.seal()


def probe_create_only(storage: Storage) -> None:
    """Refuse to start on a store that ignores put-if-absent (answers success to both of two creates of one
    key): fencing and the journal's slots would silently break there (docs/architecture.md, "Is S3's
    put-if-absent enough?"). Two PUTs and a delete per start."""
    uri = storage.uri(JOURNAL, "probe", uuid.uuid4().hex)
    first, second = storage.put_if_absent(uri, b"1"), storage.put_if_absent(uri, b"2")
    try:
        storage.delete_files([uri])
    except STORAGE_ERRORS as exc:  # a stray probe object is harmless
        log.warning("journal probe %s not deleted: %s", uri, exc)
    if not first or second:
        log.error("journal refused: the store at %s does not honour create-only writes", storage.root)
        raise JournalRefused(f"the store at {storage.root} does not honour create-only writes (If-None-Match: *): "
                             "the node journal cannot run on it")


def replay_own(storage: Storage, node: str, open_topic: Callable[[str], OpenTopic | None]) -> Replayed:
    opened: list[OpenTopic] = []

    def open_once(name: str) -> OpenTopic | None:
        topic = open_topic(name)
        if topic is not None:
            opened.append(topic)
        return topic

    try:
        return replay(storage, node, open_once, commit_entries)
    finally:
        for topic in opened:
            topic.close()
