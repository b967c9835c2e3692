"""Kafka's classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) as a state machine.

Pure, like `membership.py`: time arrives as `now` (monotonic seconds); no threads, timers, clock or I/O.
The coordinator calls in under its lock. JoinGroup and SyncGroup answers are delayed in Kafka, so `join`
and `sync` return `concurrent.futures.Future`s that this object completes itself, from within a later
`join`/`sync`/`leave`/`tick`/`close` call or at once. Their done-callbacks therefore run inside those
calls, under the caller's lock: they must not call back in.

The phases of a group (Kafka's GroupCoordinator / ClassicGroup):

- **Empty**: no members. The first JoinGroup starts the first rebalance.
- **PreparingRebalance** (the join phase): every member must send JoinGroup again; the answers wait. The
  phase completes when every member and every pending member id (MEMBER_ID_REQUIRED) has joined, or at the
  deadline: the largest rebalance timeout of the members when the phase started. Dynamic members that did
  not rejoin by then are removed; static members stay and are judged by their sessions. A phase that
  started from Empty instead waits `group.initial.rebalance.delay.ms`, one more such window each time a
  member arrived during the last one, never longer (in all) than the rebalance timeout.
  On completion the generation goes up, the protocol is chosen (supported by all members; each member
  votes for its first supported choice; most votes win, a tie goes to the oldest member's preference),
  the leader is kept if it rejoined (else the first member that did), and every waiting JoinGroup is
  answered (the leader's with every member's metadata).
- **CompletingRebalance** (the sync phase): members send SyncGroup; their answers wait for the leader's,
  which carries everyone's assignment (members it left out get b""). Then every waiting SyncGroup is
  answered and the group is **Stable**. A member that never syncs is removed at the rebalance timeout
  after the join phase (Kafka's pending-sync expiry), and the group rebalances.
- **Stable**: heartbeats; a SyncGroup answers the member's assignment at once. A JoinGroup of the leader,
  or of a member with other protocols, starts a rebalance; a follower's JoinGroup with the same protocols
  is answered at once with the current generation (Kafka does the same: no rebalance).
- **Dead**: after `close` (the group moved to another coordinator); every call answers the close error.

Any change of members (join, leave, session expiry) in Stable or CompletingRebalance starts a new join
phase; in CompletingRebalance the waiting SyncGroups get REBALANCE_IN_PROGRESS. Members that are parked in
a JoinGroup or SyncGroup cannot heartbeat, so their sessions are judged when that wait ends.

Static membership (group.instance.id): a JoinGroup with a known instance id and an empty member id replaces
the old member id, which is fenced (FENCED_INSTANCE_ID, and its parked requests get it too); the new id
keeps the assignment. In Stable this is answered at once with the current generation and no rebalance
(unless the chosen protocol would change); the answer names the previous leader id unless the client can
skip the assignment (JoinGroup v9+, KIP-814), in which case a replaced leader learns the members and
`skip_assignment`. In CompletingRebalance the replacement starts a rebalance (the leader may have assigned
the old id).

Left out, on purpose: group.max.size (GROUP_MAX_SIZE_REACHED) and Kafka's 5-minute timeout of a new
member's parked JoinGroup (the join phase here always ends by its deadline, so no JoinGroup waits longer).
Transactional offset commits are not checked here (they skip the member checks in Kafka).

The class is put together from its parts: the public calls above (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, the OffsetCommit check, `tick`, `close`) here; the phase machinery, member bookkeeping and
checks in `classic_phases.py`; states, requests, answers and the member record in `classic_model.py`;
the consumer protocol's embedded formats in `consumer_protocol.py` (re-exported here). Only the
coordinator calls in, from its request threads and its reaper, always under its lock.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import Future

from lakelog.platform.errors import InvalidRequest, LakelogError
from lakelog.platform.groups.classic_model import (
    COMPLETING,
    DEAD,
    EMPTY,
    MAX_FENCED,
    PREPARING,
    STABLE,
    ClassicMember,
    JoinRequest,
    JoinResult,
    Protocol,
    SyncResult,
    differs,
    fail,
    resolve,
)
from lakelog.platform.groups.classic_phases import Phases
from lakelog.platform.groups.consumer_protocol import consumer_assignment, consumer_subscription
from lakelog.platform.groups.errors import (
    FencedInstanceId,
    InconsistentGroupProtocol,
    MemberIdRequired,
    RebalanceInProgress,
    UnknownMemberId,
)

__all__ = [
    "COMPLETING", "DEAD", "EMPTY", "MAX_FENCED", "PREPARING", "STABLE", "ClassicGroup", "ClassicMember",
    "JoinRequest", "JoinResult", "Protocol", "SyncResult", "consumer_assignment", "consumer_subscription",
]

log = logging.getLogger(__name__)


class ClassicGroup(Phases):
    @property
    def empty(self) -> bool:
        """Nothing would be lost if the coordinator forgot this group (but its generation number)."""
        return not self.members and not self.pending_members

    # ---- JoinGroup -------------------------------------------------------------------------------------

    def join(self, request: JoinRequest, now: float, new_member_id: str) -> Future[JoinResult]:
        """JoinGroup; `new_member_id` is the id a new member (member_id "") gets. Answers a JoinResult
        when the join phase completes (or at once), or fails with the error Kafka would answer."""
        future: Future[JoinResult] = Future()
        try:
            self._check_open()
            self._check_session_timeout(request.session_timeout_ms)
            if request.member_id == "":
                self._join_new(request, now, new_member_id, future)
            else:
                self._join_known(request, now, future)
        except LakelogError as exc:
            fail(future, exc)
        return future

    def _join_new(self, request: JoinRequest, now: float, member_id: str, future: Future[JoinResult]) -> None:
        instance = request.group_instance_id
        replaced = self.static_members.get(instance) if instance is not None else None
        self._check_protocols(request, joining=replaced)
        if member_id in self.members or member_id in self.pending_members:
            raise InvalidRequest(f"member id {member_id!r} is already in use in group {self.group_id!r}")
        if replaced is not None:
            self._replace_static(self.members[replaced], request, now, member_id, future)
        elif instance is None and request.require_known_member_id:
            # KIP-394: a client that reconnects mid-join must not leave a stray member behind, so the
            # member joins for real only with the id it was given; the id expires with its session.
            self.pending_members[member_id] = now + request.session_timeout_ms / 1000
            raise MemberIdRequired(f"join group {self.group_id!r} again with member id {member_id!r}", member_id)
        else:
            self._add_member(request, now, member_id, future)

    def _join_known(self, request: JoinRequest, now: float, future: Future[JoinResult]) -> None:
        member_id = request.member_id
        self._check_protocols(request, joining=member_id)
        if member_id in self.pending_members:
            if request.group_instance_id is not None:
                raise InvalidRequest("a member id handed out with MEMBER_ID_REQUIRED is not a static member's")
            self._add_member(request, now, member_id, future)
            return
        member = self._member(member_id, request.group_instance_id)
        member.last_heartbeat = now
        same_protocols = member.protocols == request.protocols
        if self.state == COMPLETING and same_protocols:
            # It missed the answer of the phase that just completed: answer it again.
            leader = member_id == self.leader_id
            resolve(future, self._join_result(member_id, self._member_list() if leader else []))
        elif self.state == STABLE and same_protocols and member_id != self.leader_id:
            # A follower with nothing new: the current generation, so it can SyncGroup again.
            resolve(future, self._join_result(member_id, []))
        else:
            # In a join phase it waits; otherwise its protocols changed, or it is the leader, which
            # rejoins to ask for a rebalance (e.g. the topics it subscribes to changed).
            self._update_member(member, request, future)
            self._rebalance_or_complete(now, f"member {member_id} joined")

    def _add_member(self, request: JoinRequest, now: float, member_id: str, future: Future[JoinResult]) -> None:
        self.pending_members.pop(member_id, None)
        if self.state == PREPARING and self._initial_phase:
            self._member_added = True  # the first rebalance waits one more window
        if not self.members:
            self.protocol_type = request.protocol_type
        member = ClassicMember(member_id, request.group_instance_id, request.client_id, request.client_host,
                               request.session_timeout_ms, request.rebalance_timeout_ms, request.protocols,
                               last_heartbeat=now, join_future=future)
        self.members[member_id] = member
        if request.group_instance_id is not None:
            self.static_members[request.group_instance_id] = member_id
        if self.leader_id is None:
            self.leader_id = member_id
        self._rebalance_or_complete(now, f"member {member_id} joined")

    def _update_member(self, member: ClassicMember, request: JoinRequest, future: Future[JoinResult]) -> None:
        if len(self.members) == 1:
            self.protocol_type = request.protocol_type
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.client_id, member.client_host = request.client_id, request.client_host
        if member.join_future is not None:
            # Kafka drops the earlier parked request silently; answering it keeps no future pending forever.
            fail(member.join_future, RebalanceInProgress("a newer JoinGroup of this member replaced this one"))
        member.join_future = future

    def _replace_static(self, old: ClassicMember, request: JoinRequest, now: float, new_id: str,
                        future: Future[JoinResult]) -> None:
        """A static member came back with a new member id: it takes the old one's place and assignment."""
        instance = request.group_instance_id or ""
        previous_leader = self.leader_id
        fenced = FencedInstanceId(f"member {old.member_id!r} was replaced by a newer instance of {instance!r}")
        fail(old.join_future, fenced)
        fail(old.sync_future, fenced)
        del self.members[old.member_id]
        self._fence(old.member_id, instance)
        new = ClassicMember(new_id, old.group_instance_id, request.client_id, request.client_host,
                            request.session_timeout_ms, request.rebalance_timeout_ms, request.protocols,
                            assignment=old.assignment, last_heartbeat=now)
        self.members[new_id] = new
        self.static_members[instance] = new_id
        if self.leader_id == old.member_id:
            self.leader_id = new_id
        if old.member_id in self._pending_sync:
            self._pending_sync.discard(old.member_id)
            self._pending_sync.add(new_id)
        self._update_member(new, request, future)
        reason = f"static member {instance} rejoined as {new_id}"
        if self.state == STABLE and self._select_protocol() == self.protocol_name:
            self._answer_replaced_static(new, previous_leader, request.supports_skip_assignment)
        elif self.state == PREPARING:
            self._maybe_complete_join(now)
        else:
            # Stable with a protocol change; or CompletingRebalance, where the leader may already have
            # assigned the old id, which the new one would never get.
            self._prepare_rebalance(now, reason)

    def _answer_replaced_static(self, member: ClassicMember, previous_leader: str | None,
                                can_skip: bool) -> None:
        """Stable: the replacement gets the current generation; it must not assign partitions again,
        since a Stable group would not pass a new assignment on."""
        if can_skip:
            leads = member.member_id == self.leader_id
            result = self._join_result(member.member_id, self._member_list() if leads else [], skip=leads)
        else:
            # Older clients: name the previous leader id, so a replaced leader does not think it leads.
            result = self._join_result(member.member_id, [], leader=previous_leader or "")
        future, member.join_future = member.join_future, None
        resolve(future, result)

    # ---- SyncGroup -------------------------------------------------------------------------------------

    def sync(self, member_id: str, generation: int, group_instance_id: str | None, protocol_type: str | None,
             protocol_name: str | None, assignments: Mapping[str, bytes], now: float) -> Future[SyncResult]:
        """SyncGroup; `assignments` counts only from the leader. Answers the member's assignment once the
        leader's SyncGroup arrived (at once in Stable), or fails with the error Kafka would answer."""
        future: Future[SyncResult] = Future()
        try:
            self._check_open()
            member = self._member(member_id, group_instance_id)
            self._check_generation(generation)
            if differs(protocol_type, self.protocol_type) or differs(protocol_name, self.protocol_name):
                raise InconsistentGroupProtocol(
                    f"group {self.group_id!r} uses {self.protocol_type}/{self.protocol_name}, "
                    f"not {protocol_type}/{protocol_name}")
            if self.state == PREPARING:
                raise RebalanceInProgress(f"group {self.group_id!r} is rebalancing: join again")
            member.last_heartbeat = now
            self._pending_sync.discard(member_id)
            if self.state == STABLE:
                resolve(future, self._sync_result(member))
                return future
            if member.sync_future is not None:
                fail(member.sync_future, RebalanceInProgress("a newer SyncGroup of this member replaced this one"))
            member.sync_future = future
            if member_id == self.leader_id:
                self._assign(assignments, now)
        except LakelogError as exc:
            fail(future, exc)
        return future

    def _assign(self, assignments: Mapping[str, bytes], now: float) -> None:
        """The leader's assignment arrived: every member gets its share, the waiting syncs their answers."""
        missing = [m for m in self.members if m not in assignments]
        if missing:
            log.warning("group %s generation %d: the leader assigned nothing to %s", self.group_id,
                        self.generation, missing)
        for member in self.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        self.state = STABLE
        log.info("group %s generation %d is stable", self.group_id, self.generation,
                 extra={"fields": {"group": self.group_id, "generation": self.generation}})
        for member in self.members.values():
            if member.sync_future is not None:
                future, member.sync_future = member.sync_future, None
                member.last_heartbeat = now  # its session starts over once it is answered
                resolve(future, self._sync_result(member))

    # ---- Heartbeat, LeaveGroup, OffsetCommit -------------------------------------------------------------

    def heartbeat(self, member_id: str, generation: int, group_instance_id: str | None, now: float) -> None:
        """Raises FencedInstanceId, UnknownMemberId, IllegalGeneration, or RebalanceInProgress (after the
        session was refreshed: the member is alive, it must rejoin)."""
        self._check_open()
        member = self._member(member_id, group_instance_id)
        self._check_generation(generation)
        member.last_heartbeat = now
        if self.state == PREPARING:
            raise RebalanceInProgress(f"group {self.group_id!r} is rebalancing: join again")

    def leave(self, member_id: str, group_instance_id: str | None, now: float) -> None:
        """LeaveGroup of one member: by member id, or (member id "") a static member by its instance id."""
        self._check_open()
        if member_id == "":
            found = self.static_members.get(group_instance_id) if group_instance_id is not None else None
            if found is None:
                raise UnknownMemberId(f"no static member {group_instance_id!r} in group {self.group_id!r}")
            member = self.members[found]
        elif member_id in self.pending_members:
            del self.pending_members[member_id]
            self._maybe_complete_join(now)  # the join phase may have waited for it
            return
        else:
            member = self._member(member_id, group_instance_id)
        self._remove_and_rebalance(member, now, f"member {member.member_id} left",
                                   UnknownMemberId(f"member {member.member_id!r} left group {self.group_id!r}"))

    def check_commit(self, member_id: str, generation: int, group_instance_id: str | None,
                     now: float | None = None) -> None:
        """Raises for an OffsetCommit Kafka refuses; with `now`, an accepted one refreshes the session.

        Generation -1 without a member id (a consumer that assigns itself, or an admin tool) may commit
        only to an Empty group; to a group with members Kafka answers UNKNOWN_MEMBER_ID. A commit during
        PreparingRebalance is accepted, as in Kafka: consumers commit right before they rejoin."""
        self._check_open()
        if generation < 0 and self.state == EMPTY:
            return
        if generation < 0 and member_id == "" and group_instance_id is None:
            raise UnknownMemberId(f"group {self.group_id!r} has members: commit as one of them")
        member = self._member(member_id, group_instance_id)
        self._check_generation(generation)
        if self.state == COMPLETING:
            raise RebalanceInProgress(f"group {self.group_id!r} is completing a rebalance: sync first")
        if now is not None:
            member.last_heartbeat = now

    # ---- time and the end of the group ---------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Expire pending member ids and silent members, members that never synced, and end a join phase
        whose deadline passed."""
        if self._closed is not None:
            return
        self._expire_pending_members(now)
        self._expire_sessions(now)
        self._expire_pending_syncs(now)
        if self.state == PREPARING and self._join_deadline is not None and now >= self._join_deadline:
            self._join_deadline_passed(now)

    def close(self, error: LakelogError) -> None:
        """The coordinator moved the group elsewhere: every parked request gets `error`, as does every
        later call."""
        self._closed = error
        for member in self.members.values():
            fail(member.join_future, error)
            fail(member.sync_future, error)
            member.join_future = member.sync_future = None
        self.pending_members.clear()
        self._join_deadline = self._sync_deadline = None
        self.state = DEAD
