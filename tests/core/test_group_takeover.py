"""A group moving between coordinators (nodes on one root): the new coordinator serves it only once the old
one let go, with every commit the old one accepted until then; the old one lets go only once those commits
are durable. (With a fixed settle time instead, a node starting up took a group back while the old
coordinator still accepted commits, and the rolling-restart test saw a committed offset go backwards.)"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lakelog.platform import Broker, Record
from lakelog.platform.groups import GroupCoordinator, JoinOptions
from log_check import assert_topic_intact

OPTIONS = JoinOptions(topics=("t",), auto_offset_reset="earliest", enable_auto_commit=False)


def wait_for(predicate, timeout_s: float = 10) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def committed(coordinator: GroupCoordinator) -> int:
    return coordinator.committed("g")[("t", 0)].offset


def test_a_group_taken_over_is_served_once_released_with_the_old_coordinators_last_commits(tmp_path) -> None:
    root = str(tmp_path / "data")
    with Broker(root=root) as old_node, Broker(root=root) as new_node:
        old_node.create_topic("t", 1)
        old_node.produce("t", [Record(f"v{i}".encode()) for i in range(20)])
        old, new = GroupCoordinator(old_node), GroupCoordinator(new_node)
        let_go = threading.Event()
        try:
            member, generation = old.join("g", OPTIONS)
            old.commit("g", member, generation, [("t", 0, 5, None)]).result(10)
            new.reassign(lambda g: False, lambda g: True, lambda groups: let_go.is_set(), poll_s=0.05, wait_s=60)
            assert new.taking_over("g")
            old.commit("g", member, generation, [("t", 0, 8, None)]).result(10)  # before the old one saw the change
            time.sleep(0.3)
            assert new.taking_over("g")  # not released: not served, whatever the time
            let_go.set()
            wait_for(lambda: not new.taking_over("g"))
            assert committed(new) == 8
        finally:
            old.close()
            new.close()
    assert_topic_intact(root, "t")


@contextmanager
def two_coordinators(tmp_path: Path) -> Iterator[tuple[GroupCoordinator, GroupCoordinator]]:
    """Two coordinators on one root; the first coordinates group g, which committed offset 3."""
    with Broker(root=str(tmp_path / "data")) as broker:
        broker.create_topic("t", 1)
        first, second = GroupCoordinator(broker), GroupCoordinator(broker)
        try:
            member, generation = first.join("g", OPTIONS)
            first.commit("g", member, generation, [("t", 0, 3, None)]).result(10)
            yield first, second
        finally:
            first.close()
            second.close()


def test_a_node_still_claiming_the_group_past_the_wait_is_taken_to_be_cut_off(tmp_path: Path) -> None:
    with two_coordinators(tmp_path) as (_, second):
        second.reassign(lambda g: False, lambda g: True, lambda groups: False, poll_s=0.05, wait_s=0.3)
        wait_for(lambda: not second.taking_over("g"))
        assert committed(second) == 3


def test_the_old_coordinator_lets_go_once_the_commits_it_accepted_are_durable(tmp_path) -> None:
    with Broker(root=str(tmp_path / "data")) as broker:
        broker.create_topic("t", 1)
        coordinator = GroupCoordinator(broker)
        writes = coordinator.store._writes
        write, gate = writes._handle, threading.Event()
        try:
            member, generation = coordinator.join("g", OPTIONS)
            writes._handle = lambda batch: (gate.wait(30), write(batch))  # storage is slow to take the commit
            accepted = coordinator.commit("g", member, generation, [("t", 0, 7, None)])
            moved = threading.Thread(target=coordinator.reassign,
                                     args=(lambda g: True, lambda g: False, lambda groups: True, 0.05, 5))
            moved.start()
            moved.join(0.5)
            assert moved.is_alive(), "the node let go of the group before its last commit was durable"
            gate.set()
            moved.join(10)
            assert accepted.result(10) is None
            assert coordinator.group_ids() == []
        finally:
            gate.set()
            coordinator.close()


def test_a_takeover_overtaken_by_another_change_is_never_served(tmp_path: Path) -> None:
    let_go = threading.Event()
    with two_coordinators(tmp_path) as (_, second):
        second.reassign(lambda g: False, lambda g: True, lambda groups: let_go.is_set(), poll_s=0.05, wait_s=60)
        second.reassign(lambda g: True, lambda g: False, lambda groups: True, poll_s=0.05, wait_s=60)  # moved on
        let_go.set()
        time.sleep(0.3)
        assert not second.taking_over("g")
        assert "g" not in second.group_ids()


def test_a_commit_accepted_before_the_node_was_paused_past_its_session_does_not_land_after(tmp_path: Path) -> None:
    """Paused past its session timeout, a node's groups moved to another node, which accepted newer commits;
    a commit the paused node accepted just before must not be appended when it resumes: it would be the
    group's latest, and its committed offset would go backwards (seen in the chaos test)."""
    from lakelog.platform.cluster import Membership, Node
    from lakelog.platform.cluster.errors import NotCoordinator

    now = [1000.0]
    with Broker(root=str(tmp_path / "data")) as broker:
        broker.create_topic("t", 1)
        membership = Membership(broker.storage, Node("a", "http://127.0.0.1/a"), 1000, 3000, clock=lambda: now[0])
        membership.round()
        broker.cluster = membership
        coordinator = GroupCoordinator(broker)
        writes = coordinator.store._writes
        write, gate = writes._handle, threading.Event()
        try:
            member, generation = coordinator.join("g", OPTIONS)
            coordinator.commit("g", member, generation, [("t", 0, 3, None)]).result(10)
            writes._handle = lambda batch: (gate.wait(30), write(batch))  # the append waits out the pause
            accepted = coordinator.commit("g", member, generation, [("t", 0, 2, None)])
            now[0] += 10  # SIGSTOP past the session timeout, then SIGCONT
            gate.set()
            try:
                accepted.result(10)
                raise AssertionError("a commit was appended by a node whose membership had lapsed")
            except NotCoordinator:
                pass
        finally:
            gate.set()
            coordinator.close()
        reader = GroupCoordinator(broker)
        try:
            assert reader.store.load()["g"][("t", 0)].offset == 3
        finally:
            reader.close()
