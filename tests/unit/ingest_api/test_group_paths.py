"""`/v1/groups/{group}` paths: the group's segment stays as the client encoded it (a `/` in a group id is
`%2F`, not a new segment), the rest of the path is decoded as before."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from lakelog.ingest_api.group_paths import encoded_group_path, group_id


@pytest.mark.parametrize("group", ["plain", "roundrobin,range", "a/b", "50%", "%2F", "ünï ☃", "q?#'\""])
def test_the_group_segment_comes_back_whole(group: str) -> None:
    raw = f"/v1/groups/{quote(group, safe='')}/members/m%20one/heartbeat"
    path = encoded_group_path(f"/v1/groups/{group}/members/m one/heartbeat", raw.encode())
    segment, rest = path.removeprefix("/v1/groups/").split("/", 1)
    assert (group_id(segment), rest) == (group, "members/m one/heartbeat")


def test_other_paths_and_a_missing_raw_path() -> None:
    assert encoded_group_path("/v1/topics/a b", b"/v1/topics/a%20b") == "/v1/topics/a b"
    assert encoded_group_path("/v1/groups", b"/v1/groups") == "/v1/groups"
    assert encoded_group_path("/v1/groups/a b,c/offsets", None) == "/v1/groups/a%20b%2Cc/offsets"
    assert group_id("a%20b%2Cc") == "a b,c"
