"""A share group's membership (KIP-932's ShareGroupHeartbeat): members, their epochs and subscriptions, and
the assignment of partitions to members. Pure state; the share coordinator holds the lock.

Every member heartbeats with its epoch; joining (epoch 0) or leaving bumps the group epoch and recomputes the
assignment, as does a change of subscription or of the topics' partition counts. The assignment is Kafka's
`simple` assignor's idea: every subscribed partition goes to at least one member, and when there are more
members than partitions a partition is shared by several, since records, not partitions, are the unit a
share group hands out. A member learns its new assignment at once (no revocation: locks, not ownership,
keep two members from taking the same record).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from lakelog.platform.groups.errors import UnknownMemberId
from lakelog.platform.records import TopicPartition
from lakelog.platform.share.errors import FencedMemberEpoch

LEAVE = -1


@dataclass
class ShareMember:
    member_id: str
    epoch: int
    topics: tuple[str, ...]
    last_seen: float
    client_id: str = ""
    client_host: str = ""
    assignment: frozenset[TopicPartition] = frozenset()
    sent: frozenset[TopicPartition] | None = None  # the assignment last answered (None: not yet)
    answered_epoch: int = 0  # the epoch last answered: another member's join moves `epoch` before it is told


@dataclass
class ShareGroup:
    group_id: str
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    partition_counts: dict[str, int] = field(default_factory=dict)  # of the subscribed topics, at the last assignment

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed(self) -> set[str]:
        return {t for m in self.members.values() for t in m.topics}

    def heartbeat(self, member_id: str, epoch: int, topics: tuple[str, ...] | None, now: float,
                  counts: Callable[[set[str]], dict[str, int]], client: tuple[str, str] = ("", "")
                  ) -> ShareMember | None:
        """One heartbeat; answers the member (None once it left). Raises UnknownMemberId for a member the
        group does not know, FencedMemberEpoch for an epoch other than the member's."""
        if epoch == LEAVE:
            if self.members.pop(member_id, None) is not None:
                self._reassign(counts)
            return None
        member = self.members.get(member_id)
        if epoch == 0:
            if member is None:
                member = ShareMember(member_id, 0, topics or (), now, *client)
                self.members[member_id] = member
            elif topics is not None:
                member.topics = topics
            member.last_seen = now
            member.sent = None  # a rejoin is answered with its full assignment
            self._reassign(counts)
            member.answered_epoch = member.epoch
            return member
        if member is None:
            raise UnknownMemberId(f"member {member_id!r} is not in share group {self.group_id!r}")
        if epoch not in (member.epoch, member.answered_epoch):
            raise FencedMemberEpoch(f"member {member_id!r} of share group {self.group_id!r} is at epoch "
                                    f"{member.epoch}, not {epoch}: join again")
        member.last_seen = now
        if topics is not None and topics != member.topics:
            member.topics = topics
            self._reassign(counts)
        elif counts(set(self.partition_counts)) != self.partition_counts:  # partitions added, topics created
            self._reassign(counts)
        member.answered_epoch = member.epoch
        return member

    def expire(self, now: float, session_timeout_s: float, counts: Callable[[set[str]], dict[str, int]]) -> list[str]:
        """Remove the members silent for longer than the session timeout; answers their ids."""
        gone = [m for m, member in self.members.items() if now - member.last_seen > session_timeout_s]
        for member_id in gone:
            del self.members[member_id]
        if gone:
            self._reassign(counts)
        return gone

    def _reassign(self, counts: Callable[[set[str]], dict[str, int]]) -> None:
        self.epoch += 1
        self.partition_counts = counts(self.subscribed())
        for member_id, partitions in assign(self.members, self.partition_counts).items():
            member = self.members[member_id]
            member.assignment = partitions
            member.epoch = self.epoch


def assign(members: dict[str, ShareMember], counts: dict[str, int]) -> dict[str, frozenset[TopicPartition]]:
    """Each topic's partitions spread over the members subscribed to it, round robin in a stable order; with
    more members than partitions, partition i goes to members i, i + P, i + 2P, ... (so each member gets one)."""
    owned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for topic in sorted(counts):
        subscribers = sorted(m for m, member in members.items() if topic in member.topics)
        partitions = counts[topic]
        if not subscribers or partitions <= 0:
            continue
        for i in range(max(partitions, len(subscribers))):
            owned[subscribers[i % len(subscribers)]].add((topic, i % partitions))
    return {m: frozenset(parts) for m, parts in owned.items()}
