"""A member's poll answers are numbered (`after`, see positions.py): a poll the member abandoned (its request
timed out on a loaded machine) may still be running on the coordinator when the member asks again. If the
abandoned poll takes records while the new one long-polls and then finds nothing, the new one's empty
answer must not carry the abandoned poll's number: the member would acknowledge an answer it never got,
and its next poll would start after records no one was handed (the chaos test saw offsets 406-437 of a
partition skipped so)."""

from __future__ import annotations

from pathlib import Path

from lakelog.platform import Broker, Record
from lakelog.platform.groups import GroupCoordinator, JoinOptions

OPTIONS = JoinOptions(topics=("t",), auto_offset_reset="earliest", enable_auto_commit=False)


def offsets(poll) -> list[int]:  # type: ignore[no-untyped-def]
    return [o for result in poll.results for o in result.records.column("offset").to_pylist()]


def another_poll_during_the_wait(broker: Broker, coordinator: GroupCoordinator, member: str) -> list:
    """From now on, the first wait of a long poll produces five records and runs another poll of the member
    (after=0, answered at once) before it waits on; the list gets that other poll's answer."""
    others: list = []
    wait_for_commit = broker.wait_for_commit

    def records_arrive_and_the_other_poll_takes_them(timeout_s: float) -> None:
        if not others:
            broker.produce("t", [Record(f"v{i}".encode()) for i in range(5)])
            others.append(coordinator.poll("g", member, timeout_ms=0, after=0))
        wait_for_commit(timeout_s)

    broker.wait_for_commit = records_arrive_and_the_other_poll_takes_them  # type: ignore[method-assign]
    return others


def test_an_empty_answer_never_acknowledges_an_abandoned_polls_records(tmp_path: Path) -> None:
    with Broker(root=str(tmp_path / "data")) as broker:
        broker.create_topic("t", 1)
        coordinator = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        try:
            member, _ = coordinator.join("g", OPTIONS)
            assert coordinator.poll("g", member, timeout_ms=0, after=0).number == 0  # nothing yet: positions set
            # The member's earlier poll, given up on by the member (after=0 too), wakes during the wait.
            abandoned = another_poll_during_the_wait(broker, coordinator, member)
            answered = coordinator.poll("g", member, timeout_ms=300, after=0)  # the poll the member waits on
            assert [offsets(p) for p in abandoned] == [[0, 1, 2, 3, 4]]  # its answer went nowhere
            assert offsets(answered) == []
            assert answered.number == 0, "an empty answer acknowledged the abandoned poll's records"
            again = coordinator.poll("g", member, timeout_ms=0, after=answered.number)
            assert offsets(again) == [0, 1, 2, 3, 4]
        finally:
            coordinator.close()


def test_an_abandoned_poll_finishing_late_never_rolls_back_the_answer_the_member_got(tmp_path: Path) -> None:
    """The other order: the member's new poll (after=0) answers first with records and the member gets
    them; its abandoned poll (after=0 too) times out afterwards. That one must change nothing: rolling the
    positions back would hand the same records out again (and let a commit move backwards)."""
    with Broker(root=str(tmp_path / "data")) as broker:
        broker.create_topic("t", 1)
        coordinator = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        try:
            member, _ = coordinator.join("g", OPTIONS)
            assert coordinator.poll("g", member, timeout_ms=0, after=0).number == 0  # nothing yet: positions set
            # The member gave up on the poll waiting here and asked again (after=0): answered at once.
            received = another_poll_during_the_wait(broker, coordinator, member)
            abandoned = coordinator.poll("g", member, timeout_ms=300, after=0)  # its answer goes nowhere
            assert offsets(abandoned) == []
            assert [offsets(p) for p in received] == [[0, 1, 2, 3, 4]] and received[0].number == 1
            broker.produce("t", [Record(b"v5")])
            again = coordinator.poll("g", member, timeout_ms=0, after=received[0].number)
            assert offsets(again) == [5], "the abandoned poll rolled back the answer the member got"
        finally:
            coordinator.close()


def test_a_poll_the_member_gave_up_on_reaching_the_coordinator_late_changes_nothing(tmp_path: Path) -> None:
    """The member gave up on poll S (after=0; a relaying node stalled, a busy coordinator) and asked again:
    R (after=0) was answered, and the member got it. S reaches the coordinator only then. Its `after` is
    old: acknowledging it rolled R back, S's own answer (lost) took R's number, and the member's next poll,
    acknowledging R, started after records it never got (the chaos test's consumer read a partition up to
    383, then from 387). Numbered requests tell S is stale: it answers nothing and changes nothing."""
    with Broker(root=str(tmp_path / "data")) as broker:
        broker.create_topic("t", 1)
        coordinator = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        try:
            member, _ = coordinator.join("g", OPTIONS)
            assert coordinator.poll("g", member, timeout_ms=0, after=0, request=1).number == 0
            broker.produce("t", [Record(f"a{i}".encode()) for i in range(5)])
            received = coordinator.poll("g", member, timeout_ms=0, after=0, request=3)  # R
            assert offsets(received) == [0, 1, 2, 3, 4] and received.number == 1
            broker.produce("t", [Record(f"b{i}".encode()) for i in range(5)])
            stale = coordinator.poll("g", member, timeout_ms=0, after=0, request=2)  # S, late: its answer is lost
            assert offsets(stale) == []
            again = coordinator.poll("g", member, timeout_ms=0, after=received.number, request=4)
            assert offsets(again) == [5, 6, 7, 8, 9], "records after the answer the member got were skipped"
        finally:
            coordinator.close()
