"""Replication across sites with the node journal on: produce is acknowledged on the journal (on the control
site, with the catalog), the topic tables it commits into live on each topic's leader site, and the copies follow those table
commits. acks=all is answered once the records are in the leader's table and on min.insync.replicas sites;
consumers see no more than that many sites hold; an election carries the journal's waiting entries to the
new leader when they fit its table, and is refused (nothing changed) when they do not."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.journal import topic_state
from lakelog.platform.log import TopicLog
from lakelog.platform.replication.errors import ElectionNotAllowed
from log_check import assert_topic_intact

pytestmark = pytest.mark.slow
WAITS = {"table.commit.interval.ms": 600_000}  # entries wait in the journal until something commits them


def sites_of(tmp_path: Path, *names: str) -> dict[str, str]:
    return {name: str(tmp_path / f"site-{name}") for name in names}


def journaled(make_replicated: Callable[..., Broker], sites: dict[str, str]) -> Broker:
    return make_replicated(sites, refresh_interval_ms=50)


def table_end(site: str, topic: str, partition: int = 0) -> int:
    """A site's table of the topic, read afresh: its log end offset."""
    from lakelog.platform import Storage

    log = TopicLog(Storage.open(site), topic)
    try:
        return log.log_end_offset(partition)
    finally:
        log.close()


@contextmanager
def unreachable(site: str) -> Iterator[None]:
    """The site stops answering: its folder is moved away and a file stands in its place (every read and
    write under it fails, none creates it again)."""
    os.rename(site, site + "-away")
    Path(site).write_bytes(b"")
    try:
        yield
    finally:
        os.remove(site)
        os.rename(site + "-away", site)


def values(broker: Broker, topic: str) -> list[bytes]:
    return [r.value for r in broker.fetch(topic, 0, 0, max_records=1000)]


def test_acks_all_is_answered_once_the_records_are_on_min_insync_sites(tmp_path, make_replicated) -> None:
    sites = sites_of(tmp_path, "a", "b", "c")
    broker = journaled(make_replicated, sites)
    broker.create_topic("t", 1, {"replication.factor": 3, "min.insync.replicas": 2, **WAITS},
                        replicas=["a", "b", "c"])
    answered = broker.produce("t", [Record(b"x0"), Record(b"x1")], acks="all")
    assert answered.offsets.tolist() == [0, 1]
    # Answered: in the leader's table and copied (the journal alone would not do for acks=all).
    assert table_end(sites["a"], "t") == 2 and max(table_end(sites["b"], "t"), table_end(sites["c"], "t")) == 2

    assert broker.produce_async("t", [Record(b"y")], acks=1).result().offsets.tolist() == [2]
    assert table_end(sites["a"], "t") == 2  # acks=1: on the journal only
    # Consumers see what min.insync.replicas sites hold: not the journal's record, and not out of range.
    assert values(broker, "t") == [b"x0", b"x1"]
    waiting = broker.fetch("t", 0, 2)
    assert waiting.records.num_rows == 0 and waiting.high_watermark == 2
    broker.flush()  # the table commit from the journal
    broker.sync_replicas(["t"])  # and its copy
    time.sleep(0.1)  # past refresh_interval_ms: the followers' tables are read again
    assert values(broker, "t") == [b"x0", b"x1", b"y"]
    assert all(table_end(sites[s], "t") == 3 for s in "abc")


def test_an_election_carries_the_journals_waiting_entries_to_the_new_leader(tmp_path, make_replicated) -> None:
    """The leader site stops answering while acks=1 records wait in the journal: they cannot reach its table.
    b holds every commit a had, so the entries fit b's table at their offsets: elected, they are committed
    there, and nothing acknowledged is lost."""
    sites = sites_of(tmp_path, "a", "b")
    broker = journaled(make_replicated, sites)
    broker.create_topic("t", 1, {"replication.factor": 2, "min.insync.replicas": 1, **WAITS}, replicas=["a", "b"])
    broker.produce("t", [Record(b"v0")], acks="all")  # in a's and b's tables
    waiting = [broker.produce_async("t", [Record(b"w%d" % i)], acks=1).result().offsets.tolist() for i in range(3)]
    assert waiting == [[1], [2], [3]] and table_end(sites["a"], "t") == 1
    with unreachable(sites["a"]):  # the leader site stops answering
        election = broker.elect_leader("t")
    assert election.state.leader == "b"
    assert broker.produce("t", [Record(b"after")], acks=1).offsets.tolist() == [4]  # after the carried ones
    broker.flush()
    assert table_end(sites["b"], "t") == 5
    assert values(broker, "t") == [b"v0", b"w0", b"w1", b"w2", b"after"]
    assert assert_topic_intact(sites["b"], "t") == {0: [0, 1, 2, 3, 4]}
    broker.close()
    journal = Path(sites["a"]) / "_journal" / "gens"  # on the control site, with the catalog
    left = [n for _, _, names in os.walk(journal) for n in names if not n.startswith("_tmp")]
    assert len(left) == 1  # the generation's tombstone: every journal object was committed, then deleted


def uncopied_commit_then_waiting(make_replicated: Callable[..., Broker], sites: dict[str, str]) -> Broker:
    """Topic t led by a: v0 committed to a's table only (no replication round), then w1 waiting in the journal."""
    broker = journaled(make_replicated, sites)
    broker.create_topic("t", 1, {"replication.factor": 2, "min.insync.replicas": 1, **WAITS}, replicas=["a", "b"])
    broker.produce("t", [Record(b"v0")], acks=1)
    broker.flush()
    broker.produce_async("t", [Record(b"w1")], acks=1).result()
    return broker


def test_an_election_carries_the_leaders_uncopied_commit_below_the_waiting_entries(tmp_path,
                                                                                   make_replicated) -> None:
    """a committed a record b has not copied; then acks=1 records wait in the journal and a stops answering.
    The commit is still in a's memory: carried to b with the entries after it, nothing is lost and nothing
    left below acknowledged offsets (as when the leader site dies between a commit and its copy)."""
    sites = sites_of(tmp_path, "a", "b")
    broker = uncopied_commit_then_waiting(make_replicated, sites)
    with unreachable(sites["a"]):
        election = broker.elect_leader("t", site="b")
    assert (election.state.leader, election.state.leader_epoch) == ("b", 1)
    assert broker.produce("t", [Record(b"w2")], acks=1).offsets.tolist() == [2]
    broker.flush()
    assert values(broker, "t") == [b"v0", b"w1", b"w2"]
    assert assert_topic_intact(sites["b"], "t") == {0: [0, 1, 2]}


def test_an_election_the_waiting_entries_do_not_fit_is_refused_and_changes_nothing(tmp_path, make_replicated,
                                                                                   monkeypatch) -> None:
    """As above, but a's uncopied commit is no longer held in memory: b's table ends before the waiting
    entries, and electing b would leave a gap below acknowledged offsets. Refused, with the leader, the epoch
    and the entries as they were; once a answers, the election goes on."""
    monkeypatch.setattr(topic_state, "UNREPLICATED_MAX_BYTES", -1)  # nothing held
    sites = sites_of(tmp_path, "a", "b")
    broker = uncopied_commit_then_waiting(make_replicated, sites)
    with unreachable(sites["a"]):
        with pytest.raises(ElectionNotAllowed, match="ends at 0"):
            broker.elect_leader("t", site="b")
        state = broker.replicas.state("t", refresh=True)
        assert (state.leader, state.leader_epoch) == ("a", 0)
    assert broker.produce_async("t", [Record(b"w2")], acks=1).result().offsets.tolist() == [2]  # still works on a
    broker.flush()
    assert values(broker, "t") == [b"v0", b"w1", b"w2"]
    assert assert_topic_intact(sites["a"], "t") == {0: [0, 1, 2]}
