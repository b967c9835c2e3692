"""Staged transactional offsets are named after their group: a plain id where it always was, any other id
by its digest (any character, any length), and read back under the group's own id."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakelog.platform.storage import Storage
from lakelog.platform.transactions.staging import Staging, group_file_name
from lakelog.platform.transactions.state import PendingOffset


@pytest.mark.parametrize("group", ["orders", "a.b_c-9", "x" * 249, ".", ".."])
def test_a_plain_id_names_its_file_as_before(group: str) -> None:
    assert group_file_name(group) == f"{group}.json"


@pytest.mark.parametrize("group", ["roundrobin,range", "a/b", "../up", "ünï ☃", "~x", "x" * 250, "%2F"])
def test_any_other_id_is_named_by_its_digest(group: str) -> None:
    name = group_file_name(group)
    assert name.startswith("~") and name.endswith(".json") and len(name.encode()) <= 255
    assert "/" not in name and name != group_file_name(group + " ")


def test_staged_offsets_come_back_under_their_groups(tmp_path: Path) -> None:
    staging = Staging(Storage.open(str(tmp_path)))
    groups = ["plain", "roundrobin,range", "a/b 'c'", "x" * 5000]
    for i, group in enumerate(groups):
        staging.stage_offsets(7, 1, group, [PendingOffset(group, "t", 0, i, None)])
        staging.stage_offsets(7, 1, group, [PendingOffset(group, "t", 1, 10 + i, "m")])
    staged = staging.staged_offsets(7, 1, frozenset(groups))
    assert set(staged) == set([PendingOffset(g, "t", 0, i, None) for i, g in enumerate(groups)]
                                    + [PendingOffset(g, "t", 1, 10 + i, "m") for i, g in enumerate(groups)])
    assert (tmp_path / "_transactions" / "offsets" / "7" / "1" / "plain.json").exists()
