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


def test_an_empty_answer_never_acknowledges_an_abandoned_polls_records(tmp_path: Path) -> None:
    with Broker(root=str(tmp_path / "data")) as broker:
        broker.create_topic("t", 1)
        coordinator = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        try:
            member, _ = coordinator.join("g", OPTIONS)
            assert coordinator.poll("g", member, timeout_ms=0, after=0).number == 0  # nothing yet: positions set
            waits = []
            wait_for_commit = broker.wait_for_commit

            def records_arrive_and_the_abandoned_poll_takes_them(timeout_s: float) -> None:
                if not waits:
                    broker.produce("t", [Record(f"v{i}".encode()) for i in range(5)])
                    # The member's earlier poll, given up on by the member (after=0 too), wakes first.
                    abandoned = coordinator.poll("g", member, timeout_ms=0, after=0)
                    waits.append(offsets(abandoned))
                wait_for_commit(timeout_s)

            broker.wait_for_commit = records_arrive_and_the_abandoned_poll_takes_them  # type: ignore[method-assign]
            answered = coordinator.poll("g", member, timeout_ms=300, after=0)  # the poll the member waits on
            broker.wait_for_commit = wait_for_commit  # type: ignore[method-assign]
            assert waits == [[0, 1, 2, 3, 4]]  # the abandoned poll's answer went nowhere
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
            received = []
            wait_for_commit = broker.wait_for_commit

            def records_arrive_and_the_new_poll_takes_them(timeout_s: float) -> None:
                if not received:
                    broker.produce("t", [Record(f"v{i}".encode()) for i in range(5)])
                    # The member gave up on the poll waiting here and asked again (after=0): answered at once.
                    received.append(coordinator.poll("g", member, timeout_ms=0, after=0))
                wait_for_commit(timeout_s)

            broker.wait_for_commit = records_arrive_and_the_new_poll_takes_them  # type: ignore[method-assign]
            abandoned = coordinator.poll("g", member, timeout_ms=300, after=0)  # its answer goes nowhere
            broker.wait_for_commit = wait_for_commit  # type: ignore[method-assign]
            assert offsets(abandoned) == []
            assert [offsets(p) for p in received] == [[0, 1, 2, 3, 4]] and received[0].number == 1
            broker.produce("t", [Record(b"v5")])
            again = coordinator.poll("g", member, timeout_ms=0, after=received[0].number)
            assert offsets(again) == [5], "the abandoned poll rolled back the answer the member got"
        finally:
            coordinator.close()
