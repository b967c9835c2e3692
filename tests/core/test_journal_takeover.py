"""Two journaled writers of one topic on one root (two nodes, or two processes): each takes the topic's
epoch before it assigns offsets, fencing the other's generation and replaying what it acknowledged into
the table. The fenced writer's next put fails (retriable, nothing acknowledged), and a retry takes the
topic back the same way. However they interleave, every acknowledged record is in the table once, at the
offset it was acknowledged with."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from lakelog.platform import Broker, Record
from lakelog.platform.records import ProducerBatch
from lakelog.platform.errors import LakelogError
from lakelog.platform.journal.claims import fence_generation
from lakelog.platform.journal.errors import JournalFenced
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S


def journaled(root: Path, node: str) -> Broker:
    return Broker(root=str(root), journal_enable=True, journal_node=node, linger_ms=1, journal_linger_ms=2)


def produce_retrying(broker: Broker, value: bytes) -> int:
    """Retried while refused retriably (fenced by the other writer): two writers taking the topic from each
    other may each lose several times in a row on a loaded machine."""
    deadline = time.monotonic() + STUCK_S
    while True:
        try:
            return int(broker.produce("t", [Record(value)]).offsets[0])
        except LakelogError as exc:
            assert exc.retriable, exc
            assert time.monotonic() < deadline, f"{value!r} never acknowledged"


def test_a_takeover_fences_the_holder_and_replays_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    a, b = journaled(root, "a"), journaled(root, "b")
    try:
        a.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
        assert [produce_retrying(a, b"a%d" % i) for i in range(3)] == [0, 1, 2]
        assert a.topic_log("t").log_end_offset(0) == 0  # in a's journal only
        assert [produce_retrying(b, b"b%d" % i) for i in range(2)] == [3, 4]  # after a's, replayed by b
        try:
            a.produce("t", [Record(b"lost")])
            raise AssertionError("a fenced generation acknowledged a record")
        except JournalFenced:
            pass
        assert produce_retrying(a, b"a3") == 5  # a takes it back: b fenced, its records replayed
        assert produce_retrying(b, b"b2") == 6
    finally:
        a.close()  # each commits what it acknowledged: already in the table, refused by offset, never twice
        b.close()
    assert assert_topic_intact(str(root), "t") == {0: list(range(7))}
    with Broker(root=str(root)) as reader:
        values = [r.value for r in reader.fetch("t", 0, 0, 100)]
    assert values == [b"a0", b"a1", b"a2", b"b0", b"b1", b"a3", b"b2"]


def test_two_writers_at_once_lose_and_double_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with journaled(root, "setup") as setup:
        setup.create_topic("t", 1, {"table.commit.interval.ms": 300})
    brokers = [journaled(root, "a"), journaled(root, "b")]
    acked: dict[bytes, int] = {}
    lock = threading.Lock()
    stop = time.monotonic() + 3

    def run(n: int) -> None:
        i = 0
        while time.monotonic() < stop:
            value = b"%d-%d" % (n, i)
            offset = produce_retrying(brokers[n], value)
            with lock:
                acked[value] = offset
            i += 1

    threads = [threading.Thread(target=run, args=(n,)) for n in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for broker in brokers:
            broker.close()
    assert len({v.split(b"-")[0] for v in acked}) == 2  # both wrote
    offsets = assert_topic_intact(str(root), "t")[0]
    assert offsets == list(range(len(offsets))) and len(offsets) >= len(acked)
    with Broker(root=str(root)) as reader:
        stored = {r.value: r.offset for r in reader.fetch("t", 0, 0, len(offsets) + 1)}
    moved = {v: (o, stored.get(v)) for v, o in acked.items() if stored.get(v) != o}
    assert not moved, f"acknowledged records lost or moved: {list(moved.items())[:5]}"


def test_a_takeover_replays_an_idempotent_producer_whose_batches_the_holder_committed_meanwhile(
        tmp_path: Path) -> None:
    """b opened the topic; a then committed one batch of an idempotent producer to the table and holds the
    next only in its journal. b's takeover replays that one: the log's producer check sees a's commit of the
    same producer (another writer's batches of it), which must not refuse the replay at its fixed offsets
    (it once refused every claim, so b never wrote the topic again: the chaos test with the journal on)."""
    root = tmp_path / "root"
    a, b = journaled(root, "a"), journaled(root, "b")
    try:
        a.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
        assert b.topic_log("t").log_end_offset(0) == 0  # b's view of the table: before a's commit
        first = a.produce("t", [Record(b"p0"), Record(b"p1")], producer=ProducerBatch(4242, 0, 0))
        a.flush()  # into the table: a's commit of producer 4242
        second = a.produce("t", [Record(b"p2")], producer=ProducerBatch(4242, 0, 2))
        assert (list(first.offsets), list(second.offsets)) == ([0, 1], [2])
        assert a.topic_log("t").log_end_offset(0) == 2  # the second batch in a's journal only
        assert produce_retrying(b, b"b0") == 3  # b takes the topic over, replaying a's second batch
        # A retry of a's batches through b is answered with their offsets, not written again.
        again = b.produce("t", [Record(b"p2")], producer=ProducerBatch(4242, 0, 2))
        assert (list(again.offsets), again.duplicate) == ([2], True)
    finally:
        a.close()
        b.close()
    assert assert_topic_intact(str(root), "t") == {0: [0, 1, 2, 3]}
    with Broker(root=str(root)) as reader:
        assert [r.value for r in reader.fetch("t", 0, 0, 100)] == [b"p0", b"p1", b"p2", b"b0"]


def test_a_writer_fenced_by_a_taker_that_never_claimed_leaves_no_gap_for_the_next(tmp_path: Path) -> None:
    """A taker fences a's generation and dies before it claims the epoch: a's next put fails, a opens a new
    generation and claims the topic from its own fenced one. A later taker reads only the generation the
    latest epoch names, so a's acknowledged records of the fenced one must be in the table by then (they
    once were not: b's claim found a gap and refused every call; the chaos test with the journal on)."""
    root = tmp_path / "root"
    a, b = journaled(root, "a"), journaled(root, "b")
    try:
        a.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
        assert [produce_retrying(a, b"a%d" % i) for i in range(3)] == [0, 1, 2]
        fence_generation(a.storage, "a", a.journal.writer.run, "a taker that dies before its claim")
        assert [produce_retrying(a, b"a%d" % i) for i in range(3, 5)] == [3, 4]  # a new generation of a
        assert a.topic_log("t").log_end_offset(0) == 3  # the fenced generation's records: in the table now
        assert produce_retrying(b, b"b0") == 5  # b takes the topic over, replaying a's new generation
    finally:
        a.close()
        b.close()
    assert assert_topic_intact(str(root), "t") == {0: list(range(6))}
    with Broker(root=str(root)) as reader:
        assert [r.value for r in reader.fetch("t", 0, 0, 100)] == [b"a0", b"a1", b"a2", b"a3", b"a4", b"b0"]
