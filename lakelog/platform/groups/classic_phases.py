"""The classic group's phase machinery: the end of a join phase (leader, protocol, generation, answers),
the start of a rebalance, the expiry of pending ids, sessions and unsynced members, the bookkeeping of
members (look-up, removal, fencing), and the checks and answers every call shares.

Owns `Phases`, the base of `ClassicGroup`: the group's state and what every call shares (the protocol is
described in `classic.py`). Pure, like the rest of it: time arrives as `now`; no threads, timers, clock
or I/O. Called only from within `ClassicGroup`'s own calls, so on the coordinator's threads under its lock.
"""

from __future__ import annotations

import logging

from lakelog.platform.errors import LakelogError
from lakelog.platform.groups.classic_model import (
    COMPLETING,
    EMPTY,
    MAX_FENCED,
    PREPARING,
    STABLE,
    ClassicMember,
    JoinRequest,
    JoinResult,
    SyncResult,
    common_protocols,
    fail,
    resolve,
)
from lakelog.platform.groups.errors import (
    FencedInstanceId,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidSessionTimeout,
    RebalanceInProgress,
    UnknownMemberId,
)

log = logging.getLogger("lakelog.platform.groups.classic")  # the classic group's one logger, whichever part logs


class Phases:
    """ClassicGroup's state, phases, members and checks: the base `ClassicGroup` builds its calls on."""

    def __init__(self, group_id: str, initial_rebalance_delay_s: float = 3.0, *,
                 min_session_timeout_ms: int = 1000, max_session_timeout_ms: int = 1_800_000) -> None:
        self.group_id = group_id
        self.initial_rebalance_delay_s = initial_rebalance_delay_s
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.state = EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}  # in the order they joined
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, float] = {}  # ids handed out with MEMBER_ID_REQUIRED -> expiry
        self.fenced: dict[str, str] = {}  # replaced member id -> group.instance.id
        self._join_deadline: float | None = None  # PreparingRebalance: the phase ends by then
        self._initial_phase = False  # the join phase started from Empty: it waits in delay windows
        self._delay_cap = 0.0  # ... never beyond this
        self._member_added = False  # ... and a member arrived in the current window
        self._pending_sync: set[str] = set()  # members of this generation that have not synced yet
        self._sync_deadline: float | None = None
        self._closed: LakelogError | None = None


    # ---- time ----------------------------------------------------------------------------------------------

    def _expire_pending_members(self, now: float) -> None:
        expired = [m for m, expiry in self.pending_members.items() if now > expiry]
        for member_id in expired:
            log.info("group %s: pending member %s never joined", self.group_id, member_id)
            del self.pending_members[member_id]
        if expired:
            self._maybe_complete_join(now)

    def _expire_sessions(self, now: float) -> None:
        for member in list(self.members.values()):
            # An earlier removal may have ended a join phase (removing this one, or renewing its session).
            if member.member_id in self.members and member.session_expired(now):
                log.info("group %s: member %s missed its session timeout", self.group_id, member.member_id)
                self._remove_and_rebalance(
                    member, now, f"member {member.member_id} expired",
                    UnknownMemberId(f"member {member.member_id!r} of group {self.group_id!r} expired"))

    def _expire_pending_syncs(self, now: float) -> None:
        if self._sync_deadline is None or now < self._sync_deadline:
            return
        self._sync_deadline = None
        late = [m for m in self.members.values() if m.member_id in self._pending_sync]
        if self.state not in (COMPLETING, STABLE) or not late:
            return
        for member in late:
            self._remove(member, UnknownMemberId(f"member {member.member_id!r} never synced"))
        self._prepare_rebalance(now, f"members {[m.member_id for m in late]} never synced")

    def _join_deadline_passed(self, now: float) -> None:
        deadline = now if self._join_deadline is None else self._join_deadline
        if self._initial_phase and self._member_added and deadline < self._delay_cap:
            # group.initial.rebalance.delay.ms: a member arrived during this window, so wait another.
            self._member_added = False
            self._join_deadline = min(deadline + self.initial_rebalance_delay_s, self._delay_cap)
            if now < self._join_deadline:
                return
            # A late tick: no call came in since, so nobody arrived in that window either.
        self._complete_join(now)

    # ---- the join phase -----------------------------------------------------------------------------------

    def _rebalance_or_complete(self, now: float, reason: str) -> None:
        if self.state == PREPARING:
            self._maybe_complete_join(now)
        else:
            self._prepare_rebalance(now, reason)

    def _prepare_rebalance(self, now: float, reason: str) -> None:
        if self.state == COMPLETING:
            # The parked syncs of the generation that will never be assigned must rejoin.
            for member in self.members.values():
                member.assignment = b""
                fail(member.sync_future, RebalanceInProgress(f"group {self.group_id!r} is rebalancing: {reason}"))
                member.sync_future = None
        self._pending_sync.clear()
        self._sync_deadline = None
        initial = self.state == EMPTY
        self.state = PREPARING
        log.info("group %s is rebalancing: %s", self.group_id, reason)
        self._initial_phase = initial and self.initial_rebalance_delay_s > 0
        if self._initial_phase:
            self._join_deadline = now + self.initial_rebalance_delay_s
            self._delay_cap = now + max(self.initial_rebalance_delay_s, self._rebalance_timeout_s())
            self._member_added = False
        else:
            self._join_deadline = now + self._rebalance_timeout_s()
            self._maybe_complete_join(now)

    def _maybe_complete_join(self, now: float) -> None:
        """Ends the join phase early once everyone has joined (but the first phase waits its delay)."""
        if self.state != PREPARING:
            return
        if not self.members or (not self._initial_phase and self._all_joined()):
            self._complete_join(now)

    def _all_joined(self) -> bool:
        return not self.pending_members and all(m.join_future is not None for m in self.members.values())

    def _complete_join(self, now: float) -> None:
        for member in [m for m in self.members.values() if m.join_future is None and m.group_instance_id is None]:
            log.info("group %s: member %s did not rejoin in time", self.group_id, member.member_id)
            self._remove(member, UnknownMemberId(f"member {member.member_id!r} did not rejoin in time"))
        if self.members and not self._elect_joined_leader():
            # Only static members are left, and none rejoined: wait again; their sessions decide.
            self._initial_phase = False
            self._join_deadline = now + self._rebalance_timeout_s()
            return
        self.generation += 1
        self._join_deadline = None
        self._initial_phase = False
        if not self.members:
            self.state, self.protocol_name, self.leader_id = EMPTY, None, None
            log.info("group %s generation %d is empty", self.group_id, self.generation)
            return
        self.protocol_name = self._select_protocol()
        self.state = COMPLETING
        log.info("group %s generation %d: %d members, protocol %s, leader %s", self.group_id, self.generation,
                 len(self.members), self.protocol_name, self.leader_id,
                 extra={"fields": {"group": self.group_id, "generation": self.generation}})
        everyone = self._member_list()
        for member in self.members.values():
            member.last_heartbeat = now  # every session starts over with the new generation
            if member.join_future is not None:
                future, member.join_future = member.join_future, None
                resolve(future, self._join_result(member.member_id,
                                                   everyone if member.member_id == self.leader_id else []))
        self._pending_sync = set(self.members)
        self._sync_deadline = now + self._rebalance_timeout_s()

    def _elect_joined_leader(self) -> bool:
        """Keeps the leader if it rejoined, else makes the first member that did the leader."""
        leader = self.members.get(self.leader_id or "")
        if leader is not None and leader.join_future is not None:
            return True
        joined = next((m for m in self.members.values() if m.join_future is not None), None)
        if joined is None:
            return False
        self.leader_id = joined.member_id
        return True

    def _select_protocol(self) -> str:
        """The protocol every member supports with the most first-choice votes; a tie goes to the one the
        oldest member prefers (Kafka leaves ties to hash order)."""
        members = list(self.members.values())
        candidates = common_protocols(members)
        votes: dict[str, int] = {}
        for member in members:
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        preference = [p.name for p in members[0].protocols]
        return max(votes, key=lambda name: (votes[name], -preference.index(name)))

    # ---- members --------------------------------------------------------------------------------------------

    def _member(self, member_id: str, group_instance_id: str | None) -> ClassicMember:
        """The member a request names (Kafka's validateMember)."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                raise UnknownMemberId(f"no static member {group_instance_id!r} in group {self.group_id!r}")
            if current != member_id:
                raise FencedInstanceId(f"member {member_id!r} is not the current instance of "
                                       f"{group_instance_id!r} (that is {current!r})")
        member = self.members.get(member_id)
        if member is None:
            if member_id in self.fenced:
                raise FencedInstanceId(
                    f"member {member_id!r} was replaced by a newer instance of {self.fenced[member_id]!r}")
            raise UnknownMemberId(f"unknown member {member_id!r} of group {self.group_id!r}; join again")
        return member

    def _remove_and_rebalance(self, member: ClassicMember, now: float, reason: str, error: LakelogError) -> None:
        self._remove(member, error)
        if self.state in (STABLE, COMPLETING):
            self._prepare_rebalance(now, reason)
        else:
            self._maybe_complete_join(now)

    def _remove(self, member: ClassicMember, error: LakelogError) -> None:
        fail(member.join_future, error)
        fail(member.sync_future, error)
        member.join_future = member.sync_future = None
        del self.members[member.member_id]
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member.member_id:
            del self.static_members[instance]
        self._pending_sync.discard(member.member_id)
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)

    def _fence(self, member_id: str, instance: str) -> None:
        self.fenced[member_id] = instance
        while len(self.fenced) > MAX_FENCED:
            self.fenced.pop(next(iter(self.fenced)))

    # ---- checks and answers ------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed is not None:
            raise self._closed

    def _check_session_timeout(self, session_timeout_ms: int) -> None:
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            raise InvalidSessionTimeout(
                f"session.timeout.ms must be between {self.min_session_timeout_ms} and "
                f"{self.max_session_timeout_ms}, got {session_timeout_ms}")

    def _check_generation(self, generation: int) -> None:
        if generation != self.generation:
            raise IllegalGeneration(f"generation {generation} is not group {self.group_id!r}'s "
                                    f"current generation {self.generation}")

    def _check_protocols(self, request: JoinRequest, joining: str | None) -> None:
        """The joining member (`joining`: its current id, if any) must share the group's protocol type
        and at least one protocol with every other member."""
        if not request.protocol_type or not request.protocols:
            raise InconsistentGroupProtocol("JoinGroup needs a protocol type and at least one protocol")
        others = [m for m in self.members.values() if m.member_id != joining]
        if not others:
            return
        if request.protocol_type != self.protocol_type:
            raise InconsistentGroupProtocol(f"group {self.group_id!r} has protocol type "
                                            f"{self.protocol_type!r}, not {request.protocol_type!r}")
        if not common_protocols(others) & {p.name for p in request.protocols}:
            raise InconsistentGroupProtocol(
                f"group {self.group_id!r} members all support {sorted(common_protocols(others))}; "
                f"this member offers {[p.name for p in request.protocols]}")

    def _rebalance_timeout_s(self) -> float:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000

    def _member_list(self) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    def _join_result(self, member_id: str, members: list[tuple[str, str | None, bytes]],
                     leader: str | None = None, skip: bool = False) -> JoinResult:
        if leader is None:
            leader = self.leader_id or ""
        return JoinResult(self.generation, self.protocol_type, self.protocol_name, leader, member_id, members, skip)

    def _sync_result(self, member: ClassicMember) -> SyncResult:
        return SyncResult(self.protocol_type, self.protocol_name, member.assignment)
