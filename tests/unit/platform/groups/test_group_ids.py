"""Group ids: any non-empty string, as Kafka takes them (issue 40), and such ids stored safely: the committed
offsets' delete predicates match exactly the group named, whatever it holds."""

from __future__ import annotations

from typing import Any

import pytest

from lakelog.platform.groups.errors import InvalidGroupId
from lakelog.platform.groups.membership import check_group_id
from lakelog.platform.groups.offsets import OffsetRow, OffsetStore
from lakelog.platform.storage import Storage

ODD = ["roundrobin,range", "a b/c", "it's", 'say "hi"', "back\\slash", "x\\'y", "ünï ☃", "new\nline", "nul\0x",
       "%_like", "' OR '1'='1", "x" * 1000, "."]


@pytest.mark.parametrize("group", ODD)
def test_any_non_empty_string_is_a_group_id(group: str) -> None:
    check_group_id(group)


@pytest.mark.parametrize("group", ["", None, 7])
def test_the_empty_group_id_is_refused(group: Any) -> None:
    with pytest.raises(InvalidGroupId, match="non-empty"):
        check_group_id(group)


def test_deleting_a_group_removes_its_offsets_only(tmp_path: Any) -> None:
    store = OffsetStore(Storage.open(str(tmp_path)), lambda rows, stamp: None)
    try:
        groups = [*ODD, "plain"]
        store.submit([OffsetRow(g, "t", 0, i) for i, g in enumerate(groups)]).result()
        for group in ODD:
            assert store.delete_group(group) == 1, group
            assert store.delete_offsets(group, [("t", 0)]) == 0
        assert set(store.load()) == {"plain"}
    finally:
        store.close()
