"""Membership through heartbeat objects under a real root (a local folder): who is live, who leaves, and a
node that was paused renewing before it acts on its old view."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from lakelog.platform.cluster import Membership, Node
from lakelog.platform.cluster.errors import NotInCluster
from lakelog.platform.storage import Storage


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def member(root: Path, node_id: str, clock: Clock | None = None, timeout_ms: int = 3000) -> Membership:
    return Membership(Storage.open(str(root)), Node(node_id, f"http://127.0.0.1/{node_id}"), 1000, timeout_ms,
                      clock=clock or time.monotonic)


def age(membership: Membership, node_id: str, seconds: float) -> None:
    path = f"{membership.folder}/{node_id}.json"
    stat = os.stat(path)
    os.utime(path, (stat.st_atime - seconds, stat.st_mtime - seconds))


def ids(membership: Membership) -> list[str]:
    return [n.node_id for n in membership.round().nodes]


def test_nodes_see_each_other_and_a_node_that_stops_renewing_drops_out_after_the_session_timeout(tmp_path) -> None:
    a, b, c = (member(tmp_path, n) for n in "abc")
    for m in (a, b, c):
        m.round()
    assert ids(a) == ["a", "b", "c"]
    age(a, "c", 2.0)  # renewed 2 s before a's own renewal: within the 3 s timeout
    assert ids(b) == ["a", "b", "c"]
    age(a, "c", 2.0)  # 4 s now
    assert ids(b) == ["a", "b"]
    assert ids(c) == ["a", "b", "c"]  # c renews and is back


def test_a_node_that_leaves_is_gone_at_the_next_round_and_listeners_hear_of_it(tmp_path) -> None:
    a, b = member(tmp_path, "a"), member(tmp_path, "b")
    heard = []
    a.on_change(lambda old, new: heard.append((old and [n.node_id for n in old.nodes], [n.node_id for n in new.nodes])))
    b.round()
    a.round()
    b.leave()
    a.round()
    a.round()  # no change: no call
    assert heard == [(["a"], ["a", "b"]), (["a", "b"], ["a"])]
    assert not os.path.exists(f"{b.folder}/b.json")


def test_ownership_is_the_same_on_every_node(tmp_path) -> None:
    nodes = [member(tmp_path, n) for n in ("n1", "n2", "n3")]
    for m in nodes:
        m.round()
    views = [m.round() for m in nodes]
    for key in (f"topic:t{i}" for i in range(50)):
        assert len({view.owner(key).node_id for view in views}) == 1


def test_a_paused_node_does_not_act_on_its_old_view_until_it_renews(tmp_path) -> None:
    clock = Clock()
    a, b = member(tmp_path, "a", clock), member(tmp_path, "b")
    a.round()
    b.round()
    assert [n.node_id for n in a.view().nodes] == ["a"]  # fresh: the view of its last round, no I/O
    clock.now += 10  # paused past the session timeout: the others may have taken its work
    with pytest.raises(NotInCluster):
        a.view()
    a.round()  # the heartbeat thread renews
    assert [n.node_id for n in a.view().nodes] == ["a", "b"]


def test_a_node_counts_its_session_from_before_its_heartbeat_write(tmp_path, monkeypatch) -> None:
    """The others count a node out from its object's time; a round whose listing was slow must not let
    the node act past that (two nodes acting on one group or transactional id)."""
    clock = Clock()
    a = member(tmp_path, "a", clock)
    real_list = type(a.storage).list_modified

    def slow_listing(self, folder: str):  # type: ignore[no-untyped-def]
        clock.now += 2  # the heartbeat object was written 2 s before the round completes
        return real_list(self, folder)

    monkeypatch.setattr(type(a.storage), "list_modified", slow_listing)
    a.round()
    clock.now += 1.5  # 3.5 s after the write (session 3 s), 1.5 s after the round completed
    with pytest.raises(NotInCluster):
        a.view()


def test_a_node_renewing_after_a_lapse_starts_over_though_the_live_nodes_look_the_same(tmp_path) -> None:
    """Paused past the session timeout, a node's groups may have moved to another node and on (commits
    accepted there): the first round after it must make the listeners drop what the node held (old None),
    and requests stay refused until they did. The gap is judged by the store's clock, as the others judge."""
    a, b = member(tmp_path, "a", timeout_ms=1000), member(tmp_path, "b", timeout_ms=1000)
    b.round()
    a.round()
    heard: list[tuple[object, list[str], bool]] = []

    def listener(old, new) -> None:
        try:
            a.view()
            refused = False
        except NotInCluster:
            refused = True
        heard.append((old and [n.node_id for n in old.nodes], [n.node_id for n in new.nodes], refused))

    a.on_change(listener)
    a.round()
    assert heard == []  # nothing changed, no lapse: no call
    time.sleep(1.5)  # a is paused (SIGSTOP) past its session timeout; b renews meanwhile
    b.round()
    assert [n.node_id for n in a.round().nodes] == ["a", "b"]
    assert heard == [(None, ["a", "b"], True)]


def test_a_node_cut_off_from_the_store_fails_its_rounds(tmp_path) -> None:
    a = member(tmp_path / "root", "a")
    a.round()
    folder = tmp_path / "root" / "_cluster" / "nodes"
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    folder.write_text("not a folder")  # the store refuses every write under it
    with pytest.raises(OSError):
        a.round()


def test_a_node_id_that_is_not_a_plain_name_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="node id"):
        member(tmp_path, "../escape")


def test_a_new_owner_learns_when_the_old_one_let_go_of_a_key(tmp_path) -> None:
    """A node publishes the view it acted on once its listeners acted (it renews again right after them): a
    key moving to a joining node is released only once the node that owned it published a view in which it
    does not."""
    from lakelog.platform.cluster.ownership import owner

    old = member(tmp_path, "old")
    acted: list[list[str]] = []
    old.on_change(lambda before, after: acted.append([n.node_id for n in after.nodes]))
    old.round()
    key = next(f"group:g{i}" for i in range(100) if owner(f"group:g{i}", ["new", "old"]) == "new")
    kept = next(f"group:g{i}" for i in range(100) if owner(f"group:g{i}", ["new", "old"]) == "old")
    new = member(tmp_path, "new")
    assert ids(new) == ["new", "old"]
    assert not new.released({key})  # old has not seen the new node yet
    assert ids(old) == ["new", "old"] and acted[-1] == ["new", "old"]  # it acted on the new view...
    assert new.released({key})  # ...and published it once it had
    assert not new.released({key, kept})  # a key the old node still owns is not released
