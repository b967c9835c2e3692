"""Two journaled writers of one topic on one root (two nodes, or two processes): each takes the topic's
epoch before it assigns offsets, fencing the other's generation and replaying what it acknowledged into
the table. The fenced writer's next put fails (nothing of it acknowledged), and the broker sends its calls
once more, in a new generation that takes the topic back the same way. However they interleave, every acknowledged record is in the table once, at the
offset it was acknowledged with."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator


from lakelog.platform import Broker, Record
from lakelog.platform.records import ProduceResult, ProducerBatch
from lakelog.platform.errors import LakelogError, OffsetOutOfRange
from lakelog.platform.journal.claims import fence_generation
from lakelog.platform.storage import Storage
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S


def journaled(root: Path, node: str) -> Broker:
    return Broker(root=str(root), journal_node=node, linger_ms=1)


@contextmanager
def two_writers(root: Path) -> Iterator[tuple[Broker, Broker]]:
    """Journaled writers a and b of one root, closed at the end: each commits what it acknowledged (already in
    the table when the other replayed it: refused by offset, never twice)."""
    a, b = journaled(root, "a"), journaled(root, "b")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def produce_retrying(broker: Broker, value: bytes) -> int:
    return int(acknowledged(broker, value).offsets[0])


def acknowledged(broker: Broker, value: bytes, producer: ProducerBatch | None = None) -> ProduceResult:
    """Answered at the journal's acknowledgement (the records in the broker's journal only: produce() would
    commit the table before it returns). Retried while refused retriably (fenced by the other writer): two
    writers taking the topic from each other may each lose several times in a row on a loaded machine."""
    deadline = time.monotonic() + STUCK_S
    while True:
        try:
            return broker.produce_async("t", [Record(value)], producer=producer).result(STUCK_S)
        except LakelogError as exc:
            assert exc.retriable, exc
            assert time.monotonic() < deadline, f"{value!r} never acknowledged"


def sent_again(broker: Broker, value: bytes) -> int:
    """The broker's generation is fenced: its next produce meets the fence, and the broker sends it once
    more, in a new generation that takes the topic back. Answers the call's offset (acknowledged: in the
    journal only)."""
    fenced = broker.journal.writer.run  # type: ignore[union-attr]
    offset = int(broker.produce_async("t", [Record(value)]).result(STUCK_S).offsets[0])
    assert broker.journal.writer.run != fenced  # type: ignore[union-attr]
    return offset


def assert_stored(root: Path, values: list[bytes]) -> None:
    """The topic holds these values at offsets 0, 1, ... once each."""
    assert assert_topic_intact(str(root), "t") == {0: list(range(len(values)))}
    with Broker(root=str(root)) as reader:
        assert [r.value for r in reader.fetch("t", 0, 0, 100)] == values


def test_a_takeover_fences_the_holder_and_replays_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with two_writers(root) as (a, b):
        a.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
        assert [produce_retrying(a, b"a%d" % i) for i in range(3)] == [0, 1, 2]
        assert a.topic_log("t").log_end_offset(0) == 0  # in a's journal only
        assert [produce_retrying(b, b"b%d" % i) for i in range(2)] == [3, 4]  # after a's, replayed by b
        assert sent_again(a, b"a3") == 5  # a takes it back: b fenced, its records replayed
        assert produce_retrying(b, b"b2") == 6
    assert_stored(root, [b"a0", b"a1", b"a2", b"b0", b"b1", b"a3", b"b2"])


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
    with two_writers(root) as (a, b):
        a.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
        assert b.topic_log("t").log_end_offset(0) == 0  # b's view of the table: before a's commit
        first = a.produce_async("t", [Record(b"p0"), Record(b"p1")], producer=ProducerBatch(4242, 0, 0)).result()
        a.flush()  # into the table: a's commit of producer 4242
        second = a.produce_async("t", [Record(b"p2")], producer=ProducerBatch(4242, 0, 2)).result()
        assert (list(first.offsets), list(second.offsets)) == ([0, 1], [2])
        assert a.topic_log("t").log_end_offset(0) == 2  # the second batch in a's journal only
        assert produce_retrying(b, b"b0") == 3  # b takes the topic over, replaying a's second batch
        # A retry of a's batches through b is answered with their offsets, not written again.
        again = b.produce("t", [Record(b"p2")], producer=ProducerBatch(4242, 0, 2))
        assert (list(again.offsets), again.duplicate) == ([2], True)
    assert_stored(root, [b"p0", b"p1", b"p2", b"b0"])


def test_a_writer_fenced_by_a_taker_that_never_claimed_leaves_no_gap_for_the_next(tmp_path: Path) -> None:
    """A taker fences a's generation and dies before it claims the epoch: a's next put fails, a opens a new
    generation and claims the topic from its own fenced one. A later taker reads only the generation the
    latest epoch names, so a's acknowledged records of the fenced one must be in the table by then (they
    once were not: b's claim found a gap and refused every call; the chaos test with the journal on)."""
    root = tmp_path / "root"
    with two_writers(root) as (a, b):
        a.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
        assert [produce_retrying(a, b"a%d" % i) for i in range(3)] == [0, 1, 2]
        fence_generation(a.storage, "a", a.journal.writer.run, "a taker that dies before its claim")
        assert [produce_retrying(a, b"a%d" % i) for i in range(3, 5)] == [3, 4]  # a new generation of a
        assert a.topic_log("t").log_end_offset(0) == 3  # the fenced generation's records: in the table now
        assert produce_retrying(b, b"b0") == 5  # b takes the topic over, replaying a's new generation
    assert_stored(root, [b"a0", b"a1", b"a2", b"a3", b"a4", b"b0"])


def test_a_writer_taking_a_topic_back_learns_the_idempotent_batches_it_replayed(tmp_path: Path) -> None:
    """a committed an idempotent producer's first batch itself; b took the topic and acknowledged the next
    batch in its journal only; a takes the topic back, replaying that batch through its own log. a's
    producer state must then expect the batch after it (it once still expected the replayed one, so the
    producer's next batch was refused OUT_OF_ORDER_SEQUENCE_NUMBER: the chaos test with the journal on)."""
    root = tmp_path / "root"
    with two_writers(root) as (a, b):
        a.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
        first = a.produce_async("t", [Record(b"p0"), Record(b"p1")], producer=ProducerBatch(77, 0, 0)).result()
        a.flush()  # a's own commit: nothing another writer wrote
        second = b.produce_async("t", [Record(b"p2")], producer=ProducerBatch(77, 0, 2)).result()  # b takes the topic
        assert (list(first.offsets), list(second.offsets)) == ([0, 1], [2])
        assert b.topic_log("t").log_end_offset(0) == 2  # the second batch in b's journal only
        third = acknowledged(a, b"p3", ProducerBatch(77, 0, 3))  # its first call after the fence may be refused
        assert (list(third.offsets), third.duplicate) == ([3], False)
    assert_stored(root, [b"p0", b"p1", b"p2", b"p3"])


def test_a_new_leader_takes_the_topic_over_before_it_judges_an_offset_past_its_table(tmp_path: Path) -> None:
    """a acknowledged records in its journal only, then stopped answering; b leads the topic now but has
    produced nothing to it, so it has not taken it over yet. A group's committed offset or a consumer's
    fetch past b's table is not out of range: b takes the topic first (its replay puts a's records in the
    table) and serves them (it once answered OFFSET_OUT_OF_RANGE: the consumer reset and the group's
    committed offset went back, in the chaos test with the journal on)."""
    root = tmp_path / "root"
    with two_writers(root) as (a, b):
        a.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
        acked = a.produce_async("t", [Record(b"a%d" % i) for i in range(4)]).result()  # in a's journal only
        assert list(acked.offsets) == [0, 1, 2, 3]
        assert b.topic_log("t").log_end_offset(0) == 0
        b.check_offset("t", 0, 4)  # a's end: the committed offset of a consumer that read everything
        assert b.topic_log("t").log_end_offset(0) == 4  # taken over: a's records replayed into the table
        assert [r.value for r in b.fetch("t", 0, 2, 10)] == [b"a2", b"a3"]
        try:
            b.check_offset("t", 0, 5)
            raise AssertionError("an offset past every acknowledged record was taken")
        except OffsetOutOfRange as exc:
            assert (exc.log_start_offset, exc.log_end_offset) == (0, 4)
    assert assert_topic_intact(str(root), "t") == {0: [0, 1, 2, 3]}


def test_a_leader_the_topic_was_taken_from_takes_it_back_before_it_judges_an_offset(tmp_path: Path) -> None:
    """a led the topic (its epoch), then b took it and acknowledged records in its journal only; a has put
    nothing since, so it has not met b's fence. Asked to judge b's end (a group's committed offset, as a
    relayed log end), a reads the topic's latest epoch first and takes the topic back: b's records are
    replayed into the table, not called out of range from a's own ends (ci48: a committed offset reset to
    earliest in the rolling restart with the journal on)."""
    root = tmp_path / "root"
    with two_writers(root) as (a, b):
        a.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
        assert produce_retrying(a, b"a0") == 0
        assert [produce_retrying(b, b"b%d" % i) for i in range(3)] == [1, 2, 3]  # b fenced a, replayed a0
        assert a.log_end_offsets("t", taken=True) == [4]  # the relayed ends b's records count in
        a.check_offset("t", 0, 4)
        assert a.topic_log("t").log_end_offset(0) == 4  # taken back: b's records replayed into the table
        assert [r.value for r in a.fetch("t", 0, 0, 10)] == [b"a0", b"b0", b"b1", b"b2"]
        assert sent_again(b, b"b3") == 4
    assert assert_topic_intact(str(root), "t") == {0: [0, 1, 2, 3, 4]}


class WriterMovesOn:
    """A taker's storage: right after its `listing`-th listing of a generation (1: the first), something
    else happens (the generation's writer lands and commits more slots, so the slots the taker listed are
    deleted, as the writer keeps only its highest; or another taker fences the generation)."""

    def __init__(self, storage: Storage, writer_moves_on: Callable[[], None], listing: int = 1) -> None:
        self._storage, self._moves_on, self._countdown = storage, writer_moves_on, listing

    def list_names(self, uri: str) -> list[str]:
        names = self._storage.list_names(uri)
        self._countdown -= 1
        if self._countdown == 0:
            self._moves_on()
        return names

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)


def test_a_fence_put_in_a_slot_the_writer_used_and_deleted_is_put_again_above_it(tmp_path: Path) -> None:
    """The slot after the highest one a taker listed may be free again by the time its fence is put: the
    writer landed higher slots meanwhile and deleted the committed ones. The fence must end above the
    writer's highest slot, or the writer never meets it and two writers hand out the same offsets (it once
    landed in the hole: the two-writer test found offsets acknowledged twice)."""
    root = tmp_path / "root"
    a = journaled(root, "a")
    try:
        a.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
        a.produce("t", [Record(b"x0")])
        a.flush()  # slot 0 landed and committed (kept: the highest)
        run = a.journal.writer.run

        def writer_moves_on() -> None:
            for value in (b"x1", b"x2"):  # slots 1 and 2; each commit deletes the slot below
                a.produce("t", [Record(value)])
                a.flush()

        fence, below = fence_generation(WriterMovesOn(a.storage, writer_moves_on), "a", run, "a taker")
        assert (fence, below) == (3, [1, 2])  # above the writer's highest slot; the fence in the hole at 1 stays
        assert sent_again(a, b"x3") == 3
    finally:
        a.close()
    assert assert_topic_intact(str(root), "t") == {0: [0, 1, 2, 3]}


def test_a_fence_below_another_takers_fence_stays(tmp_path: Path) -> None:
    """Two takers fence one generation at once: the first one's listing after its fence finds the second's
    above it. That is no hole (no slot of the writer's above): the first fence stands, and is never
    deleted, or the writer's put of that slot, still in flight, could land below the second taker's
    replay (the model, protocol.py, found it)."""
    root = tmp_path / "root"
    a = journaled(root, "a")
    try:
        a.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
        a.produce("t", [Record(b"x0")])  # slot 0
        run = a.journal.writer.run
        second: list[tuple[int, list[int]]] = []
        first = fence_generation(WriterMovesOn(a.storage, lambda: second.append(
            fence_generation(a.storage, "a", run, "taker 2")), listing=2), "a", run, "taker 1")
        assert (first, second) == ((1, [0]), [(2, [0, 1])])
        assert a.storage.list_names(a.storage.uri("_journal", "gens", "a", run)) == [
            "00000000000000000000", "00000000000000000001", "00000000000000000002"]
        assert sent_again(a, b"x1") == 1
    finally:
        a.close()
    assert assert_topic_intact(str(root), "t") == {0: [0, 1]}
