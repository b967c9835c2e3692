"""Journal entries into a topic's table at their own offsets: the committer's (entries past a gap wait)
and a takeover's or a start's replay (a gap or an overlap is an error: nothing else will fill it)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakelog.platform.deadline import Deadline
from lakelog.platform.errors import OffsetsMoved, ProducerStateChanged
from lakelog.platform.journal.errors import JournalReplayFailed
from lakelog.platform.journal.planner import plan_commit
from lakelog.platform.journal.topic_state import Acknowledged

if TYPE_CHECKING:
    from lakelog.platform.broker.open_topic import OpenTopic

log = logging.getLogger(__name__)

# One attempt's bound; a commit that fails is tried again next tick. Short enough that a leader site that stopped
# answering holds the topic's commit lock (an election, an acks=all call waiting on it) seconds, not a minute.
COMMIT_TIMEOUT_MS = 15_000
REPLAN_ATTEMPTS = 5


def commit_entries(opened: OpenTopic, items: list[Acknowledged],
                   deadline: Deadline | None = None) -> list[Acknowledged]:
    """Put these acknowledged entries of one topic into its table at their offsets; answers the entries now
    there (committed or found there). Raises if the table cannot take them (left for the next try). Entries of
    a partition refused because another Delta writer changed it wait for `lakelog topics repair` (which
    removes what was appended beyond the log end, so they fit again); the other partitions' go on."""
    topic_log = opened.log
    items = [item for item in items if not topic_log.outside.refusals.refused(item.entry.partition)]
    by_entry = {id(item.entry): item for item in items}
    ends = {item.entry.partition: topic_log.log_end_offset(item.entry.partition) for item in items}
    plan = plan_commit(ends, [item.entry for item in items])
    if plan.conflicting:
        log.error("journal entries of %s overlap records already in its table (another writer?): %s",
                  opened.meta.name, plan.conflicting[:3])
    done = [by_entry[id(e)] for e in plan.skip]
    if plan.commit:
        table = pa.concat_tables([by_entry[id(e)].records for e in plan.commit])
        partitions = table.column("partition").to_numpy()
        producer_ids = frozenset(pc.unique(table.column("producer_id").drop_null()).to_pylist())
        _append(opened, table.drop_columns(["partition"]), partitions, producer_ids, plan.bases(), deadline)
        done.extend(by_entry[id(e)] for e in plan.commit)
        opened.notify_committed()
    return done


def _append(opened: OpenTopic, records: pa.Table, partitions: np.ndarray, producer_ids: frozenset[int],
            bases: dict[int, int], deadline: Deadline | None = None) -> None:
    """The log's append at fixed offsets. Its producer check (another writer committed batches of these
    producers since this node looked: the fenced holder's committer, a taker's replay) guards a retry
    against being committed twice at new offsets; these entries' offsets are fixed and `expect_bases`
    keeps them from landing twice, so the commit goes on once the producer state here has forgotten
    those producers (read from the table again, as a topic writer's flush does)."""
    for attempt in range(REPLAN_ATTEMPTS):
        bound = deadline if deadline is not None else Deadline.after_ms(COMMIT_TIMEOUT_MS)  # per attempt
        try:
            opened.log.append(records, partitions, bound, producer_ids=producer_ids, expect_bases=bases)
            return
        except ProducerStateChanged:
            if attempt == REPLAN_ATTEMPTS - 1:
                raise
            opened.producers.forget_changed(opened.log.take_changed_producers())


def replay_entries(opened: OpenTopic, items: list[Acknowledged]) -> list[Acknowledged]:
    """Every entry into the table, or `JournalReplayFailed` and nothing committed. Another writer committing
    the same entries meanwhile (the fenced one's committer) only makes it plan again. The entries are
    another generation's: their producers' state here is read from the table again (this node's own
    commit of them is not another writer's, so the log's producer check would not tell it)."""
    try:
        for _ in range(REPLAN_ATTEMPTS - 1):
            try:
                return _replay_once(opened, items)
            except OffsetsMoved:
                opened.log.refresh()
        return _replay_once(opened, items)
    finally:
        opened.producers.forget_changed(_producers_of(items))


def _producers_of(items: list[Acknowledged]) -> set[int]:
    ids: set[int] = set()
    for item in items:
        ids.update(int(p) for p in item.records.column("producer_id").drop_null().to_pylist())
    return ids


def _replay_once(opened: OpenTopic, items: list[Acknowledged]) -> list[Acknowledged]:
    ends = {i.entry.partition: opened.log.log_end_offset(i.entry.partition) for i in items}
    bad = plan_commit(ends, [i.entry for i in items]).misfit
    if bad is not None:
        log.error("journal replay into %s refused: %s (table ends at %s)", opened.meta.name, bad,
                  ends.get(bad.partition))
        raise JournalReplayFailed(
            f"journal entry {bad} cannot be placed: the table of {opened.meta.name!r} ends at "
            f"{ends.get(bad.partition)} (a gap before it or other records at its offsets)")
    return commit_entries(opened, items)
