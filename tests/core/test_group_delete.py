"""Deleting a consumer group: its committed offsets leave the control table, other groups' stay, and a
group with members is refused (Kafka's NON_EMPTY_GROUP)."""

from __future__ import annotations

import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.groups import GroupCoordinator, JoinOptions
from lakelog.platform.groups.admin import ResetSpec, ResetTarget
from lakelog.platform.groups.errors import GroupIdNotFound, NonEmptyGroup


def test_delete_group_removes_its_offsets_and_refuses_a_group_with_members(tmp_path) -> None:
    root = str(tmp_path / "data")
    with Broker(root=root) as broker:
        broker.create_topic("t", 2)
        coordinator = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        try:
            coordinator.commit("gone", None, -1, [("t", 0, 0, None), ("t", 1, 0, "m")]).result()
            coordinator.commit("kept", None, -1, [("t", 0, 0, None)]).result()
            member, _ = coordinator.join("gone", JoinOptions(topics=("t",)))
            with pytest.raises(NonEmptyGroup):
                coordinator.delete_group("gone")
            coordinator.leave("gone", member)
            coordinator.delete_group("gone")
            assert coordinator.group_ids() == ["kept"]
            with pytest.raises(GroupIdNotFound):
                coordinator.delete_group("gone")
        finally:
            coordinator.close()
        reloaded = GroupCoordinator(broker, initial_rebalance_delay_ms=0)  # what storage now says
        try:
            assert reloaded.group_ids() == ["kept"]
            assert reloaded.committed("kept")[("t", 0)].offset == 0
        finally:
            reloaded.close()


def test_reset_plan_changes_nothing_until_executed(tmp_path) -> None:
    with Broker(root=str(tmp_path / "data")) as broker:
        broker.create_topic("t", 1)
        broker.produce("t", [Record(b"v") for _ in range(5)])
        coordinator = GroupCoordinator(broker, initial_rebalance_delay_ms=0)
        try:
            coordinator.commit("g", None, -1, [("t", 0, 4, None)]).result()
            plan = coordinator.plan_reset("g", ResetSpec("shift", -3), [("t", None)])
            assert plan == [ResetTarget("t", 0, 4, 1)]
            assert coordinator.committed("g")[("t", 0)].offset == 4
            coordinator.execute_reset("g", plan).result()
            assert coordinator.committed("g")[("t", 0)].offset == 1
            member, _ = coordinator.join("g", JoinOptions(topics=("t",)))
            with pytest.raises(NonEmptyGroup):
                coordinator.plan_reset("g", ResetSpec("earliest"), None)
            with pytest.raises(NonEmptyGroup):
                coordinator.execute_reset("g", plan)
            coordinator.leave("g", member)
        finally:
            coordinator.close()
