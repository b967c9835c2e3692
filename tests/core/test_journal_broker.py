"""The node journal inside one broker on a local root: a fenced slot's calls go again in the next
generation; exactly-once appends and a transaction's reservation interleave with journaled produce; a
replay that would leave a gap refuses the start and changes nothing; a deleted topic's entries let its
journal objects go; an idempotent producer's retry is answered once, before and after a replay and when
its state is rebuilt while its batches are still in the journal; a restart claims its topics without a
fence each; a topic whose table commits fall behind takes no more.

Records meant to be in the journal only are produced with `produce_async(...).result()`, answered at the
journal's acknowledgement: `produce()` also commits the topic's table before it returns."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from lakelog.platform import Broker, Record
from lakelog.platform.records import ProducerBatch
from lakelog.platform.deadline import Deadline
from lakelog.platform.errors import OutOfOrderSequence, StorageUnavailable
from lakelog.platform.journal.errors import JournalReplayFailed
from lakelog.platform.journal.objects import FENCE, encode_marker, encode_records, generation_path, slot_name
from lakelog.schemas import TOPIC_SCHEMA
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S


def journal_files(root: Path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root / "_journal")
                  for n in names if not n.startswith("_tmp"))


def test_a_fenced_slots_calls_go_again_in_the_next_generation(tmp_path: Path) -> None:
    """A put that meets a fence landed nothing: the broker sends its calls once more, in the writer's next
    generation (as a client's retry would, without the client's retriable error)."""
    root = tmp_path / "root"
    with Broker(root=str(root)) as broker:
        broker.create_topic("t", 1)
        first = broker.produce("t", [Record(b"a")])
        writer = broker.journal.writer  # type: ignore[union-attr]
        run, slot = writer.run, writer.slot
        # Another node's fence in the next slot (as a taker would put it).
        fence = encode_marker(FENCE, "other", run, slot)
        assert writer.storage.put_if_absent(writer.slot_uri(run, slot), fence)
        again = broker.produce("t", [Record(b"b")])
        assert writer.run != run and writer.storage.read_bytes(writer.slot_uri(run, slot)) == fence
        assert (first.offsets.tolist(), again.offsets.tolist()) == ([0], [1])
        broker.flush()
        assert [r.value for r in broker.fetch("t", 0, 0)] == [b"a", b"b"]
    assert assert_topic_intact(str(root), "t") == {0: [0, 1]}


def test_exactly_once_appends_between_journaled_produce(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with Broker(root=str(root)) as broker:
        broker.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
        broker.produce("t", [Record(b"a"), Record(b"b")])
        batch = pa.table({"value": [b"x", b"y"]})
        appended = broker.append_exactly_once("t", batch, "query-1", 1)
        assert appended is not None and appended.offsets.tolist() == [2, 3]
        assert broker.append_exactly_once("t", batch, "query-1", 1) is None  # the replayed batch: skipped
        assert broker.produce("t", [Record(b"c")]).offsets.tolist() == [4]
        broker.flush()
        assert [r.value for r in broker.fetch("t", 0, 0)] == [b"a", b"b", b"x", b"y", b"c"]
    assert assert_topic_intact(str(root), "t") == {0: [0, 1, 2, 3, 4]}


def test_a_reservation_follows_the_journals_acknowledged_records(tmp_path: Path) -> None:
    """A transaction's reservation takes table offsets: the journal's acknowledged entries go to the table
    first, and the journal's next offsets follow the reservation."""
    root = tmp_path / "root"
    with Broker(root=str(root)) as broker:
        broker.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
        # acknowledged, not committed (produce() would commit the table before it returns)
        assert broker.produce_async("t", [Record(b"a"), Record(b"b")]).result().offsets.tolist() == [0, 1]
        assert broker.topic_log("t").log_end_offset(0) == 0  # on the journal only
        assert broker.topic_log("t").reserve(0, 3, 7, 1, 0, Deadline.after_ms(int(STUCK_S * 1000))) == 2
        assert broker.topic_log("t").log_end_offset(0) == 5
        assert broker.produce("t", [Record(b"c")]).offsets.tolist() == [5]


def test_a_replay_with_a_gap_refuses_the_start(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with Broker(root=str(root)) as broker:
        broker.create_topic("t", 1)
    records = pa.table({"partition": pa.array([0], pa.int32()), "offset": pa.array([5], pa.int64()),
                        "timestamp": pa.array([0], pa.timestamp("ms", tz="UTC")),
                        "timestamp_type": pa.array([0], pa.int8()), "key": pa.array([None], pa.binary()),
                        "value": pa.array([b"v"], pa.binary()),
                        "headers": pa.array([None], TOPIC_SCHEMA.field("headers").type),
                        "producer_id": pa.array([None], pa.int64()),
                        "producer_epoch": pa.array([None], pa.int16()),
                        "sequence": pa.array([None], pa.int32())}).cast(TOPIC_SCHEMA)
    folder = root / generation_path("node", "r1")
    folder.mkdir(parents=True)
    (folder / slot_name(0)).write_bytes(encode_records("node", "r1", 0, {"t": records}))
    with pytest.raises(JournalReplayFailed, match="cannot be placed"):
        Broker(root=str(root))
    # kept for an operator to look at, behind the fence this start put in the generation
    assert journal_files(root) == [f"_journal/gens/node/r1/{slot_name(0)}", f"_journal/gens/node/r1/{slot_name(1)}"]
    with pytest.raises(JournalReplayFailed, match="cannot be placed"):  # the node's next start: refused again
        Broker(root=str(root))
    with Broker(root=str(root), journal_node="reader") as broker:  # another node's journal: the table is as it was
        assert broker.topic_log("t").log_end_offset(0) == 0


def test_a_deleted_topic_lets_its_journal_objects_go(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with Broker(root=str(root)) as broker:
        broker.create_topic("gone", 1, {"table.commit.interval.ms": 600_000})
        broker.create_topic("kept", 1)
        for i in range(3):
            broker.produce("gone", [Record(b"g%d" % i)])
        broker.delete_topic("gone")
        broker.produce("kept", [Record(b"k")])
        broker.flush()
        assert [f for f in journal_files(root) if "/gens/" in f] == [
            f"_journal/gens/node/{broker.journal.writer.run}/{slot_name(3)}"]  # type: ignore[union-attr]  # the highest
        assert not [f for f in journal_files(root) if "/epochs/gone/" in f]  # its epochs went with it
    with Broker(root=str(root)) as broker:
        assert broker.journal.replayed.records == 0  # type: ignore[union-attr]
        assert [r.value for r in broker.fetch("kept", 0, 0)] == [b"k"]


def test_an_idempotent_retry_is_answered_once_before_and_after_a_replay(tmp_path: Path) -> None:
    root = tmp_path / "root"
    batch = ProducerBatch(producer_id=42, producer_epoch=0, base_sequence=0)
    crashed = Broker(root=str(root))  # never closed: as if the process died
    crashed.create_topic("t", 1, {"table.commit.interval.ms": 600_000})
    # acknowledged, not committed (produce() would commit the table before it returns)
    first = crashed.produce_async("t", [Record(b"a"), Record(b"b")], producer=batch).result()
    retried = crashed.produce_async("t", [Record(b"a"), Record(b"b")], producer=batch).result()
    assert retried.offsets.tolist() == first.offsets.tolist() == [0, 1]
    assert crashed.topic_log("t").log_end_offset(0) == 0  # in the journal only
    with Broker(root=str(root)) as restarted:  # replays the journal into the table
        assert restarted.journal.replayed.records == 2  # type: ignore[union-attr]
        after = restarted.produce("t", [Record(b"a"), Record(b"b")], producer=batch)
        assert after.offsets.tolist() == [0, 1]  # the producer state is rebuilt from the replayed records
        following = ProducerBatch(producer_id=42, producer_epoch=0, base_sequence=2)
        assert restarted.produce("t", [Record(b"c")], producer=following).offsets.tolist() == [2]
    assert assert_topic_intact(str(root), "t") == {0: [0, 1, 2]}
    crashed.close()  # a zombie's late commit of entries the table holds: refused by offset, never doubled
    assert assert_topic_intact(str(root), "t") == {0: [0, 1, 2]}


def test_a_restart_claims_each_topic_without_fencing_the_generations_it_settled(tmp_path: Path) -> None:
    """A start fences and replays each generation the node left, or finds it sealed. A topic whose epoch
    names one of those is then claimed with one PUT: no fence per topic in that generation (it once got
    one per topic: 300 fences at a restart with 300 topics), nothing of it read again."""
    root = tmp_path / "root"
    topics = ["a", "b", "c"]

    def generation(run: str) -> list[str]:
        return [f for f in journal_files(root) if f"/gens/node/{run}/" in f]

    crashed = Broker(root=str(root))  # never closed before the restart: as if it died
    for topic in topics:
        crashed.create_topic(topic, 1, {"table.commit.interval.ms": 600_000})
        crashed.produce_async(topic, [Record(topic.encode())]).result()  # acknowledged, in the journal only
    died = crashed.journal.writer.run  # type: ignore[union-attr]
    with Broker(root=str(root)) as restarted:  # fences and replays the generation
        assert restarted.journal.replayed.records == 3  # type: ignore[union-attr]
        fenced = generation(died)
        assert len(fenced) == 1  # its fence (the replayed objects deleted)
        assert [restarted.produce(t, [Record(b"again")]).offsets.tolist() for t in topics] == [[1]] * 3
        assert generation(died) == fenced
        sealed = restarted.journal.writer.run  # type: ignore[union-attr]
    with Broker(root=str(root)) as again:  # the clean stop sealed its generation
        left = generation(sealed)
        assert [again.produce(t, [Record(b"third")]).offsets.tolist() for t in topics] == [[2]] * 3
        assert generation(sealed) == left
    for topic in topics:
        assert assert_topic_intact(str(root), topic) == {0: [0, 1, 2]}
    crashed.close()  # the fenced zombie's late commit: its entries are in the tables, refused by offset
    for topic in topics:
        assert assert_topic_intact(str(root), topic) == {0: [0, 1, 2]}


def test_a_topic_whose_table_commits_fall_behind_takes_no_more(tmp_path: Path) -> None:
    with Broker(root=str(tmp_path / "root")) as broker:
        broker.create_topic("t", 1, {"table.commit.bytes": 1000, "table.commit.interval.ms": 600_000})
        broker.journal.committer.close()  # type: ignore[union-attr]  # as if every table commit failed
        acked = 0
        with pytest.raises(StorageUnavailable, match="wait for their table commit") as behind:
            for _ in range(100):
                broker.produce_async("t", [Record(b"v" * 500)]).result()  # acknowledged: no table commit awaited
                acked += 1
        assert behind.value.retriable and 0 < acked < 100
        broker.journal.committer.commit_all()  # type: ignore[union-attr]  # the table caught up
        assert broker.produce("t", [Record(b"v")]).offsets.tolist() == [acked]
    assert assert_topic_intact(str(tmp_path / "root"), "t") == {0: list(range(acked + 1))}


def test_a_producer_state_rebuilt_on_the_leader_counts_its_batches_still_in_the_journal(tmp_path: Path) -> None:
    root = tmp_path / "root"
    batch = ProducerBatch(producer_id=42, producer_epoch=0, base_sequence=0)
    with Broker(root=str(root), journal_node="a", linger_ms=1) as broker:
        broker.create_topic("t", 2, {"table.commit.interval.ms": 600_000})
        # acknowledged, not committed (produce() would commit the table before it returns); first another
        # producer's record, elsewhere
        broker.produce_async("t", [Record(b"x", partition=1)]).result()
        first = broker.produce_async("t", [Record(b"a", partition=0), Record(b"b", partition=0)],
                                     producer=batch).result()
        assert broker.topic_log("t").log_end_offset(0) == 0  # in the journal only
        opened = broker._open("t")
        opened.producers.forget_changed({42})  # as a reload of every producer's state would drop it
        retried = broker.produce_async("t", [Record(b"a", partition=0), Record(b"b", partition=0)],
                                       producer=batch).result()
        assert retried.duplicate and retried.offsets.tolist() == first.offsets.tolist() == [0, 1]
        assert broker.topic_log("t").log_end_offset(0) == 0  # still in the journal only
        opened.producers.forget_changed(None)
        following = ProducerBatch(producer_id=42, producer_epoch=0, base_sequence=2)
        assert broker.produce("t", [Record(b"c", partition=0)], producer=following).offsets.tolist() == [2]
        with pytest.raises(OutOfOrderSequence):  # the rebuilt state knows the next sequence is 3
            broker.produce("t", [Record(b"d", partition=0)], producer=ProducerBatch(42, 0, 5))
    assert assert_topic_intact(str(root), "t") == {0: [0, 1, 2], 1: [0]}
