"""Fetch: records from an offset, long polling until enough arrived, and the high watermark.

Reads go to the nearest in-sync replica when a site is asked for, else the leader's log. A long poll
waits on the node's commit notification, bounded by the refresh interval, so other writers' commits
(another node of the cluster, another process on the same root) are seen too. Consumers see offsets below
the high watermark only: on a replicated topic, what `min.insync.replicas` sites hold.

Owns `Fetcher`, which the broker holds one of and calls from any caller's thread (a long poll blocks
that thread); it reads through the `OpenTopic` it is given (`open_topic.py`) and imports nothing of
the broker.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable

import pyarrow as pa
import pyarrow.compute as pc

from lakelog.platform.log import TopicLog
from lakelog.platform.log.read import limit_bytes
from lakelog.platform.records import FetchResult, Marker, record_sizes
from lakelog.platform.replication.manager import ReplicaManager
from lakelog.schemas import TOPIC_SCHEMA

if TYPE_CHECKING:
    from lakelog.platform.broker.open_topic import OpenTopic


class Fetcher:
    def __init__(self, replicas: ReplicaManager | None, refresh_interval_ms: int,
                 committed: threading.Condition) -> None:
        self.replicas = replicas
        self.interval_s = refresh_interval_ms / 1000
        self.committed = committed

    def fetch(self, opened: OpenTopic, partition: int, offset: int, max_records: int, max_bytes: int | None,
              timeout_ms: int, site: str | None, min_bytes: int, closed: Callable[[], bool],
              led_elsewhere: bool = False) -> FetchResult:
        """`led_elsewhere`: another node writes this topic, so even a fetch below this node's log end
        refreshes (at most once per refresh interval) to answer a current high watermark."""
        topic = opened.meta.name
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        topic_log = self.replica_log(opened, site)
        while True:
            journaled = self._from_journal(opened, topic_log, partition, offset, max_records, max_bytes)
            if journaled is not None:  # acknowledged, not yet in the table: served from the journal's memory
                table, high_watermark, stable = journaled
                if table.num_rows or deadline - time.monotonic() <= 0 or closed():
                    return FetchResult(topic, partition, table, topic_log.log_start_offset(partition),
                                       high_watermark, stable)
                with self.committed:
                    self.committed.wait(min(deadline - time.monotonic(), self.interval_s))
                continue
            if offset > topic_log.log_end_offset(partition) or offset < topic_log.log_start_offset(partition):
                topic_log.refresh()  # out of range as far as this node knows: another writer, or retention, moved it
            elif led_elsewhere or offset == topic_log.log_end_offset(partition):
                topic_log.maybe_refresh(self.interval_s)
            high_watermark = self.high_watermark(opened, topic_log, partition)
            if self._journal_visible(opened, topic_log):
                high_watermark = max(high_watermark, opened.journal.end(partition))
            # Records of open transactions are not in the table: nothing from the first one on is answered
            # (the reserved offsets are a hole the read would stop at anyway). None open: all that is visible.
            table_end = topic_log.log_end_offset(partition)
            stable = min(high_watermark, topic_log.last_stable_offset(partition))
            if stable >= table_end:
                stable = high_watermark
            if stable <= offset <= table_end:
                table = topic_log.read(partition, table_end, 1)  # empty: not visible yet
            else:
                table = topic_log.read(partition, offset, max_records, max_bytes)
                table = self._journal_tail(opened, topic_log, partition, table, max_records, max_bytes)
            if table.num_rows and table.column("offset")[-1].as_py() >= stable:
                table = table.filter(pc.less(table.column("offset"), stable))
            remaining = deadline - time.monotonic()
            enough = table.num_rows > 0 and (min_bytes <= 1 or _payload_bytes(table) >= min_bytes)
            skip_to = topic_log.gap_end(partition, offset, stable) if not table.num_rows and offset < stable else offset
            if enough or skip_to > offset or remaining <= 0 or closed():
                return FetchResult(topic, partition, table, topic_log.log_start_offset(partition), high_watermark,
                                   stable, *_skipped(topic_log, partition, offset, skip_to))
            with self.committed:
                self.committed.wait(min(remaining, self.interval_s))

    def _from_journal(self, opened: OpenTopic, topic_log: TopicLog, partition: int, offset: int,
                      max_records: int, max_bytes: int | None) -> tuple[pa.Table, int, int] | None:
        """Records at or past the table's log end that the leader acknowledged, the
        high watermark past them and the last stable offset; None when the table answers (or the offset is
        past every record). Behind an open transaction's reserved offsets (in the table) nothing is served:
        its records come first, once it ends."""
        journal = opened.journal
        if topic_log is not opened.log:
            return None
        topic_log.check_served(partition)  # changed by another Delta writer: not served from memory either
        table_end, end = topic_log.log_end_offset(partition), journal.end(partition)
        if not table_end <= offset <= end or (offset == end and end == table_end):
            return None
        if not self._journal_visible(opened, topic_log):  # in range, not readable until enough sites hold it
            high_watermark = self.high_watermark(opened, topic_log, partition)
            return TOPIC_SCHEMA.empty_table(), high_watermark, high_watermark
        stable = topic_log.last_stable_offset(partition)
        if stable < table_end:
            return TOPIC_SCHEMA.empty_table(), end, stable
        records = journal.read(partition, offset, max_records) if offset < end else None
        if records is None:
            if offset < end:  # committed meanwhile: the table has them now
                return None
            records = TOPIC_SCHEMA.empty_table()
        if max_bytes is not None:
            records = limit_bytes(records, max_bytes)
        return records, end, end

    def _journal_tail(self, opened: OpenTopic, topic_log: TopicLog, partition: int, table: pa.Table,
                      max_records: int, max_bytes: int | None) -> pa.Table:
        """A read that reached the table's end goes on with the records acknowledged after it (the journal's
        memory), within `max_records` and `max_bytes`: one fetch answers what a consumer may see."""
        end = topic_log.log_end_offset(partition)
        if not table.num_rows or table.num_rows >= max_records or table.column("offset")[-1].as_py() != end - 1 \
                or not self._journal_visible(opened, topic_log):
            return table
        tail = opened.journal.read(partition, end, max_records - table.num_rows)
        if tail is None:
            return table
        whole = pa.concat_tables([table, tail.select(table.column_names).cast(table.schema)])
        return whole if max_bytes is None else limit_bytes(whole, max_bytes)

    def _journal_visible(self, opened: OpenTopic, topic_log: TopicLog) -> bool:
        """Records acknowledged on the node journal are read before their table commit, but not on a
        replicated topic whose min.insync.replicas needs followers: consumers see there only what that many
        sites hold (the table commit and its copies)."""
        return topic_log is opened.log and not self._needs_followers(opened)

    def _needs_followers(self, opened: OpenTopic) -> bool:
        return (self.replicas is not None and opened.replica_state is not None
                and opened.meta.config.min_insync_replicas > 1)

    def high_watermark(self, opened: OpenTopic, topic_log: TopicLog, partition: int) -> int:
        """What consumers may read: on a replicated topic, only what min.insync.replicas sites hold.

        A follower holds only commits copied from the leader, so reading there
        is bounded by construction; at the leader, acks=1 commits become
        visible once enough in-sync followers have them (Kafka's high watermark).
        """
        end = topic_log.log_end_offset(partition)
        needed = opened.meta.config.min_insync_replicas - 1  # followers besides the leader
        if topic_log is not opened.log or self.replicas is None or not self._needs_followers(opened):
            return end
        current = self.replicas.require_state(opened.meta.name)
        ends = sorted((self._replica(opened, site).log_end_offset(partition)
                       for site in current.isr if site != current.leader), reverse=True)
        if len(ends) >= needed:
            return min(end, ends[needed - 1])
        return min([end, *ends])  # fewer in-sync followers than needed: what every in-sync replica holds

    def replica_log(self, opened: OpenTopic, site: str | None) -> TopicLog:
        """The log to read: the nearest in-sync replica when one is asked for, else the leader's."""
        state = opened.replica_state
        if site is None or self.replicas is None or state is None or site == state.leader:
            return opened.log
        current = self.replicas.require_state(opened.meta.name)
        if site not in current.isr:
            return opened.log
        # Followers hold only commits copied from the leader, so a read there never runs ahead of it.
        return self._replica(opened, site)

    def _replica(self, opened: OpenTopic, site: str) -> TopicLog:
        replica = opened.site_logs.get(site)
        if replica is None:
            if self.replicas is None:
                raise ValueError(f"topic {opened.meta.name!r} has no replica sites")  # only replicated topics get here
            replica = opened.site_logs[site] = TopicLog(self.replicas.sites[site], opened.meta.name)
        replica.maybe_refresh(self.interval_s)
        return replica


def _skipped(topic_log: TopicLog, partition: int, offset: int, skip_to: int) -> tuple[int | None, Marker | None]:
    """A fetch that found no record from `offset` up to `skip_to`: where its reader continues, and the
    transaction marker it passes last (Kafka answers that control batch, which moves a consumer on)."""
    if skip_to <= offset:
        return None, None
    return skip_to, topic_log.marker_at(partition, skip_to - 1)


def _payload_bytes(table: pa.Table) -> int:
    return int(pc.sum(record_sizes(table)).as_py() or 0)
