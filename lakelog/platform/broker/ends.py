"""The broker's log ends: each partition's end as a describe, `latest`, a group's lag and an offset check
see it. The end is past the records acknowledged but not yet in the table: this
node's (its journal's memory) or, at a node that does not lead the topic, the leader's (relay.py).

An offset past every end a node knows is called out of range only by a leader that holds the topic's
epoch: the previous leader's acknowledged records wait in its journal until a takeover replays them into
the table (claims.py), and a new leader takes the topic over lazily, at its first produce. So a leader
takes the topic first (checked on the store each time: another generation may have taken it since), a
node whose leader gives no answer refuses retriably (NOT_LEADER_OR_FOLLOWER), and so does a node asked
for the leader's ends that does not lead the topic in its own view. A consumer told OFFSET_OUT_OF_RANGE
there would reset: past acknowledged records, or back to read them again (a group's committed offset
going back).

Owns `LogEnds`, which the broker holds and answers these calls with. Any thread may call it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from lakelog.platform.broker.open_topic import OpenTopic
from lakelog.platform.broker.seat import ClusterSeat
from lakelog.platform.catalog.catalog import TopicMeta
from lakelog.platform.cluster.errors import NodeUnavailable
from lakelog.platform.cluster.relay import at_least
from lakelog.platform.errors import OffsetOutOfRange
from lakelog.platform.journal.node import NodeJournal
from lakelog.platform.log import PartitionState


@dataclass(frozen=True)
class TopicDescription:
    meta: TopicMeta
    partitions: list[PartitionState]

    @classmethod
    def created(cls, meta: TopicMeta) -> TopicDescription:
        """A topic as its create leaves it, every partition empty: no storage read, no log opened."""
        return cls(meta, [PartitionState(p, 0, 0, 0, 0) for p in range(meta.partitions)])


def _past_journal(state: PartitionState, opened: OpenTopic) -> PartitionState:
    """The table's state with the records acknowledged on the journal: its end past them, their bytes counted."""
    return replace(state, log_end_offset=max(state.log_end_offset, opened.journal.end(state.partition)),
                   size_bytes=state.size_bytes + opened.journal.waiting_bytes(state.partition))


class LogEnds:
    """The broker's log ends: describe, `latest`, offset checks, with the journal's reads.

    Thread contract: any thread may call it (the HTTP tier's request threads, the Kafka listener's
    workers, the groups' coordinator, the CLI). It holds no state of its own, so no lock: the open topics
    are the broker's set's (`open_topic`, `check_partition`: under that set's lock), what the journal
    acknowledged is the journal's, which node leads a topic is the cluster seat's.
    """

    def __init__(self, open_topic: Callable[[str], OpenTopic], check_partition: Callable[[OpenTopic, int], None],
                 journal: NodeJournal, seat: ClusterSeat) -> None:
        """`open_topic(name)`: the topic's machinery (opened on first use); `check_partition(opened, p)`:
        raises UnknownTopicOrPartition unless p is one of its partitions; `journal`: the node journal;
        `seat`: the node's place in the cluster (the topics' leaders and their ends)."""
        self._open = open_topic
        self._partition_check = check_partition
        self._journal = journal
        self._seat = seat

    def describe_topic(self, name: str) -> TopicDescription:
        topic = self._open(name)
        self._journal.commit_topic(topic)  # its sizes count every acknowledged record
        topic.log.refresh()
        states = [topic.log.partition_state(p) for p in range(topic.meta.partitions)]
        leader = self._seat.leader_ends(name)  # acknowledged records the table does not hold yet count too
        states = [replace(s, log_end_offset=at_least(leader, s.partition,
                                                     max(s.log_end_offset, topic.journal.end(s.partition))))
                  for s in states]
        return TopicDescription(topic.meta, states)

    def known_states(self, name: str, partitions: int | None = None) -> list[PartitionState]:
        """Each partition as this node knows it, from memory (no storage request): the table's state, its log
        end past the records acknowledged on the journal. `partitions`: how many (default: the topic's)."""
        opened = self._open(name)
        count = opened.meta.partitions if partitions is None else partitions
        return [_past_journal(opened.log.partition_state(p), opened) for p in range(count)]

    def log_end_offsets(self, topic: str, relay: bool = True, taken: bool = False) -> list[int]:
        """Each partition's log end offset as this node knows it (no table read): past its acknowledged
        records, or (`relay`) the leader's when another node leads the topic and answers.
        `taken`: this node is asked, as the leader, for the ends an offset is judged by (the relayed ends):
        it holds the topic's epoch first, and refuses (NotLeader) when its own view names another leader or
        none (leaving the cluster, or not yet in it): taking the topic back for a node that asked on an older
        view would fence its leader's writes."""
        opened = self._open(topic)
        if taken:
            self._seat.check_leads(topic)
            self._journal.take_for_reads(opened)
        ends = [opened.log.log_end_offset(p) for p in range(opened.meta.partitions)]
        leader = self._seat.leader_ends(topic) if relay else None
        return [at_least(leader, p, max(end, opened.journal.end(p))) for p, end in enumerate(ends)]

    def list_offset(self, topic: str, partition: int, spec: str | int) -> int:
        """`earliest`, `latest`, or a timestamp in ms: the earliest offset at or after it (latest if none)."""
        opened = self._open(topic)
        self._partition_check(opened, partition)
        if spec not in ("earliest", "latest"):  # by timestamp: the table holds every acknowledged record first
            self._journal.commit_topic(opened)
        opened.log.refresh()
        if spec == "latest":  # acknowledged records not in the table yet
            return at_least(self._seat.leader_ends(topic), partition,
                            max(opened.log.offset_for(partition, spec), opened.journal.end(partition)))
        return opened.log.offset_for(partition, spec)

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """Where read_committed consumers stop: below an open transaction's first reserved offset (in the
        table), else the log end past every acknowledged record."""
        opened = self._open(topic)
        stable = opened.log.last_stable_offset(partition)
        if stable < opened.log.log_end_offset(partition):
            return stable
        return self.list_offset(topic, partition, "latest")

    def check_offset(self, topic: str, partition: int, offset: int) -> None:
        """Raise OffsetOutOfRange when `offset` is outside [log start, log end], as the log is now: what
        this node knew is looked at again first (another node may have written past it). An offset past
        that is judged by the leader holding the topic's epoch (the module's note)."""
        opened = self._open(topic)
        start, end = self.known_range(opened, partition)
        if not start <= offset <= end:
            opened.log.refresh()
            start, end = self.known_range(opened, partition)
        if offset > end:
            end = self._end_past(opened, partition, end)
        if not start <= offset <= end:
            raise OffsetOutOfRange(f"offset {offset} out of range [{start}, {end}] for {topic}-{partition}",
                                   start, end)

    def known_range(self, opened: OpenTopic, partition: int) -> tuple[int, int]:
        """The partition's log start and end as this node knows them (its end past the journal's records)."""
        end = max(opened.log.log_end_offset(partition), opened.journal.end(partition))
        return opened.log.log_start_offset(partition), end

    def _end_past(self, opened: OpenTopic, partition: int, end: int) -> int:
        """The end an offset past `end` (all this node knows) is judged by: this node's
        once it holds the topic's epoch, or the leader's; NodeUnavailable when the leader gives none."""
        leader = self._seat.remote_leader(opened.meta.name)
        if leader is None:
            self._journal.take_for_reads(opened)
            return self.known_range(opened, partition)[1]
        ends = self._seat.leader_ends(opened.meta.name)
        if ends is None:
            raise NodeUnavailable(f"the leader of {opened.meta.name!r} ({leader.node_id}) did not answer where "
                                  f"partition {partition} ends (this node knows of offsets up to {end}); retry")
        return at_least(ends, partition, end)

    def past_known_end(self, opened: OpenTopic, partition: int, offset: int) -> bool:
        """A fetch at `offset` reads past every offset this node knows."""
        return offset > self.known_range(opened, partition)[1]
