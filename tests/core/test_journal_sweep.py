"""The journal sweep (`lakelog jobs journal-sweep`): a generation left by a node that is gone shrinks to its
fences once takers have replayed its entries into the tables. Objects still holding entries of a topic
nobody took yet stay until that topic is taken; fences and the generation's highest slot always stay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lakelog.platform import Broker, Record
from lakelog.platform.journal.objects import FENCE, RECORDS, decode, generation_path, generations_path
from lakelog.platform.journal.sweep import broker_table_ends, sweep_broker, sweep_journal
from lakelog.platform.storage import Storage
from lakelog.settings import Settings, own_journal
from lakelog.spark_jobs.jobs import run_job
from tests.core.test_journal_takeover import journaled
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

SLOW = {"table.commit.interval.ms": 600_000}  # entries stay in the journal only, unless a taker replays them


def acked(broker: Broker, topic: str, value: bytes) -> int:
    """Produced and acknowledged in the broker's journal only (produce() would commit the table before it
    returns); answers its offset."""
    return int(broker.produce_async(topic, [Record(value)]).result(STUCK_S).offsets[0])


def scheduler_broker(root: Path) -> Broker:
    """The maintenance jobs' kind of broker: a journal folder of its own (settings.own_journal), never written."""
    return Broker(own_journal(Settings(root=str(root)), "job"))


def kinds(storage: Storage, node: str, run: str) -> dict[int, tuple[str, set[str]]]:
    """Slot -> (kind, topics of its entries) of a generation as stored now."""
    folder = storage.uri(generation_path(node, run))
    out = {}
    for name in storage.list_names(folder):
        obj = decode(storage.read_bytes(f"{folder}/{name}"))
        out[int(name)] = (obj.kind, obj.topics())
    return out


def test_a_gone_nodes_generation_is_swept_down_to_its_fences(tmp_path: Path) -> None:
    root = tmp_path / "root"
    # a lingers (linger_ms), so two calls made at once may go into one object; the checks hold either way (a
    # loaded machine, or a put already out, may put them in two): they follow where t2's entry landed
    a = Broker(root=str(root), journal_node="a", linger_ms=1)
    b = journaled(root, "b")
    try:
        a.create_topic("t1", 1, SLOW)
        a.create_topic("t2", 1, SLOW)
        assert [acked(a, "t1", b"a%d" % i) for i in range(2)] == [0, 1]
        both = [a.produce_async("t1", [Record(b"a2")]), a.produce_async("t2", [Record(b"x0")])]
        assert [int(f.result(STUCK_S).offsets[0]) for f in both] == [2, 0]
        assert acked(a, "t1", b"a3") == 3
        run = a.journal.writer.run  # the generation a leaves behind ("gone": it never writes again)
        storage = Storage.open(str(root))
        written = kinds(storage, "a", run)
        assert {kind for kind, _ in written.values()} == {RECORDS} and sorted(written) == list(range(len(written)))
        assert sum(len(topics) for _, topics in written.values()) == 5  # t1's 4 calls and t2's
        of_t2 = {slot: written[slot] for slot, (_, topics) in written.items() if "t2" in topics}
        assert len(of_t2) == 1
        fence = len(written)  # the slot b's takeover fences

        with scheduler_broker(root) as sweeper:
            assert run_job("journal-sweep", sweeper).files_deleted == 0  # nothing fenced yet

            assert sweeper.topic_log("t1").log_end_offset(0) == 0  # its view before the takeover: read fresh later
            assert int(b.produce("t1", [Record(b"b0")]).offsets[0]) == 4  # b takes t1: a fenced, t1 replayed
            report = run_job("journal-sweep", sweeper)
            assert report.files_deleted == len(written) - 1
            # the object with t2's entry stays: nobody took t2, its table does not hold it
            assert kinds(storage, "a", run) == {**of_t2, fence: (FENCE, set())}
            assert [p.topic for p in report.plans] == [generation_path("a", run)]
            assert "kept for t2" in report.plans[0].description
            assert run_job("journal-sweep", sweeper).files_deleted == 0  # again: nothing more

        # a journaled broker can run the sweep too (its own live generation is skipped; nothing new fenced)
        assert sweep_broker(b).deleted == 0
        assert int(b.produce("t2", [Record(b"y0")]).offsets[0]) == 1  # b takes t2: fenced again, t2 replayed
        swept = lakelog(str(root), "jobs", "journal-sweep")
        assert swept.returncode == 0, swept.stderr
        assert json.loads(swept.stdout.strip().splitlines()[-1])["files_deleted"] == 1
        assert kinds(storage, "a", run) == {fence: (FENCE, set()), fence + 1: (FENCE, set())}  # fences, the top kept
        assert b.journal.writer.run in storage.list_names(storage.uri(generations_path("b")))
    finally:
        a.close()
        b.close()
    assert assert_topic_intact(str(root), "t1") == {0: list(range(5))}
    assert assert_topic_intact(str(root), "t2") == {0: [0, 1]}
    with Broker(root=str(root)) as reader:
        assert [r.value for r in reader.fetch("t1", 0, 0, 100)] == [b"a0", b"a1", b"a2", b"a3", b"b0"]
        assert [r.value for r in reader.fetch("t2", 0, 0, 100)] == [b"x0", b"y0"]


def test_entries_of_a_deleted_topic_count_as_done(tmp_path: Path) -> None:
    root = tmp_path / "root"
    a, b = journaled(root, "a"), journaled(root, "b")
    try:
        a.create_topic("t1", 1, SLOW)
        a.create_topic("gone", 1, SLOW)
        assert (acked(a, "gone", b"g"), acked(a, "t1", b"a0")) == (0, 0)
        run = a.journal.writer.run
        assert int(b.produce("t1", [Record(b"b0")]).offsets[0]) == 1  # fences a's generation, replays t1 only
        with scheduler_broker(root) as sweeper:
            skipped = sweep_journal(sweeper.storage, broker_table_ends(sweeper), skip={("a", run)})
            # listed: a's, b's and the sweeper's own (live, empty, unfenced); a's skipped (a process's own: never)
            assert (skipped.generations, skipped.fenced, skipped.deleted) == (3, 0, 0)
            assert run_job("journal-sweep", sweeper).files_deleted == 1  # t1's; "gone" still exists: its entry waits
            storage = Storage.open(str(root))
            assert kinds(storage, "a", run) == {0: (RECORDS, {"gone"}), 2: (FENCE, set())}
            sweeper.delete_topic("gone")
            assert run_job("journal-sweep", sweeper).files_deleted == 1  # the catalog says it is gone
        assert kinds(storage, "a", run) == {2: (FENCE, set())}
    finally:
        a.close()
        b.close()
    assert assert_topic_intact(str(root), "t1") == {0: [0, 1]}


def lakelog(root: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lakelog.cli", "--root", root, *args], capture_output=True,
                          text=True, timeout=STUCK_S, env={**os.environ, "LAKELOG_LOG_LEVEL": "WARNING"})

