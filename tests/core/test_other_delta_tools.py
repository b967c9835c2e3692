"""A topic table among other Delta tools, on a local root and on S3: delta-rs run from another process while
lakelog serves the topic under produce and consume.

- OPTIMIZE (compaction), Z-ORDER, a checkpoint, log cleanup and a vacuum within retention: files lakelog
  did not write (partitions interleaved in a row group, offsets in any order) are indexed by their content,
  and every acknowledged record is fetched once, at its offset, by the live consumer, by a new read, and
  after a restart.
- An append from outside (at partition 0's next offsets), a delete, an update, a merge, an overwrite, a
  restore: lakelog refuses the partitions whose records changed (DATA_CHANGED_OUTSIDE_LAKELOG), before and
  after a restart, and serves no duplicate offset; the other partitions go on.
- lakelog's own roll rewrites another tool's file into files of one partition each.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Callable

import pyarrow as pa
import pytest

from lakelog.platform import Broker
from lakelog.platform.errors import DataChangedOutside
from lakelog.settings import Settings
from lakelog.spark_jobs.jobs import run_job
from tests.core.conftest import BrokerFactory
from tests.log_check import assert_topic_intact, topic_offsets
from tests.outside_writer import run_delta_rs
from tests.patience import STUCK_S

PARTITIONS = 3


def delta_rs(broker: Broker, topic: str, code: str) -> str:
    """Run `code` against the topic's table in another Python process (`dt`: its DeltaTable)."""
    return run_delta_rs(broker.storage.uri("topics", topic), broker.storage.delta_options(), code)


def batch(n: int, tag: str) -> pa.Table:
    return pa.table({"key": [f"k{i}" for i in range(n)], "value": [f"{tag}-{i}" for i in range(n)]})


class LiveTopic:
    """A producer thread (acknowledged records by (partition, offset)) and a consumer thread that must get
    each partition's offsets one after another, each once, from the first; errors are kept, not raised."""

    def __init__(self, broker: Broker, topic: str) -> None:
        self.broker, self.topic = broker, topic
        self.acked: dict[tuple[int, int], bytes] = {}
        self.consumed: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        self.errors: list[BaseException] = []
        self.refused: Counter[int] = Counter()
        self._stop = threading.Event()
        self._produced = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]

    def __enter__(self) -> "LiveTopic":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _produce(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            # One call per partition (a refused partition fails only its own), all in one flush: a commit
            # every round, few enough files (and commits) that another tool's OPTIMIZE ends well within the
            # log's 30 s even on a loaded machine: five rounds a second at most.
            sent = []
            for p in range(PARTITIONS):
                values = [f"{n}-{p}-{i}".encode() for i in range(7)]
                sent.append((values, self.broker.produce_async(self.topic, pa.table({"value": values,
                                                                                    "partition": [p] * 7}))))
            for values, future in sent:
                try:
                    result = future.result(STUCK_S)
                except DataChangedOutside as exc:
                    self.refused[exc.partition] += 1
                    continue
                except BaseException as exc:  # noqa: BLE001 (reported by the test)
                    self.errors.append(exc)
                    return
                for (partition, offset, _), value in zip(result.records(), values):
                    self.acked[(partition, offset)] = value
            time.sleep(0.2)
        self._produced.set()

    def _consume(self) -> None:
        while True:
            done = self._produced.is_set()  # read before the last round: it then sees every record
            try:
                for p in range(PARTITIONS):
                    self._fetch(p)
            except BaseException as exc:  # noqa: BLE001 (reported by the test)
                self.errors.append(exc)
                return
            if done:
                return
            time.sleep(0.02)

    def _fetch(self, p: int) -> None:
        if p in self.refused:
            return
        while True:
            offset = len(self.consumed[p])
            try:
                records = self.broker.fetch(self.topic, p, offset, max_records=500).records
            except DataChangedOutside as exc:
                self.refused[exc.partition] += 1
                return
            if records.num_rows == 0:
                return
            got = records.column("offset").to_pylist()
            assert got == list(range(offset, offset + len(got))), f"partition {p}: asked {offset}, got {got[:5]}"
            self.consumed[p] += zip(got, records.column("value").to_pylist())

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(STUCK_S)

    def wait_for(self, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + STUCK_S
        while not condition():
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, "the live topic did not get there"
            time.sleep(0.05)


def read_all(broker: Broker, topic: str, partitions: range = range(PARTITIONS)) -> dict[tuple[int, int], bytes]:
    """Every record through lakelog's fetch, checking each comes once at the offset after the last."""
    found: dict[tuple[int, int], bytes] = {}
    for p in partitions:
        offset = broker.list_offset(topic, p, "earliest")
        while True:
            records = broker.fetch(topic, p, offset, max_records=1000).records
            if records.num_rows == 0:
                break
            offsets = records.column("offset").to_pylist()
            assert offsets == list(range(offset, offset + len(offsets)))
            found.update(((p, o), v) for o, v in zip(offsets, records.column("value").to_pylist()))
            offset = offsets[-1] + 1
    return found


def test_other_tools_maintenance_keeps_every_acknowledged_record_at_its_offset(make_broker: BrokerFactory) -> None:
    broker = make_broker()
    broker.create_topic("t", PARTITIONS)
    with LiveTopic(broker, "t") as live:
        for step, code in [
            ("compact", "print(retried(lambda: dt.optimize.compact()))"),
            ("z-order", "print(retried(lambda: dt.optimize.z_order(['key'])))"),
            ("compact", "print(retried(lambda: dt.optimize.compact()))"),  # the tools' own files, again
            ("checkpoint and log cleanup", "dt.create_checkpoint(); dt.cleanup_metadata()"),
            ("vacuum within retention", "print(dt.vacuum(dry_run=False))"),
        ]:
            before = len(live.acked)
            live.wait_for(lambda: len(live.acked) >= before + 3 * 7 * PARTITIONS)  # flushes before each step
            delta_rs(broker, "t", code)
        consumed = sum(len(c) for c in live.consumed.values())
        live.wait_for(lambda: sum(len(c) for c in live.consumed.values()) > consumed + 7 * PARTITIONS)
    assert not live.errors and not live.refused, (live.errors, live.refused)
    acked = dict(live.acked)
    assert {(p, o): v for p, records in live.consumed.items() for o, v in records} == acked
    assert read_all(broker, "t") == acked
    log = broker.topic_log("t")
    assert any(s.by_content for p in range(PARTITIONS) for s in log.segments(p))  # the tools' files were read
    broker.close()
    assert read_all(make_broker(), "t") == acked  # a restart: entries by content from the slices cache or the files
    assert_topic_intact(make_broker.root, "t", make_broker.storage)  # type: ignore[attr-defined]


def test_an_append_from_outside_refuses_the_partition_and_no_duplicate_is_served(make_broker: BrokerFactory) -> None:
    broker = make_broker()
    broker.create_topic("t", PARTITIONS)
    with LiveTopic(broker, "t") as live:
        live.wait_for(lambda: len(live.acked) >= 5 * 7 * PARTITIONS)
        broker.committed_log("t")  # what was acknowledged is in the table: the outside writer appends past it
        # At partition 0's next offsets, as the report had it: lakelog would hand them out again.
        delta_rs(broker, "t", """
end = dt.transaction_version("lakelog.partition.0")
retried(lambda: write_deltalake(uri, rows(0, range(end, end + 5)), mode="append", storage_options=options))""")
        live.wait_for(lambda: live.refused[0] > 0)
    assert not live.errors and set(live.refused) == {0}
    with pytest.raises(DataChangedOutside, match="partition 0 of topic 't' was changed outside lakelog"):
        broker.fetch("t", 0, 0)
    with pytest.raises(DataChangedOutside):
        broker.produce("t", pa.table({"value": [b"x"], "partition": [0]}))
    acked = dict(live.acked)
    others = read_all(broker, "t", range(1, PARTITIONS))
    assert others == {k: v for k, v in acked.items() if k[0] != 0}
    served = [o for o, _ in live.consumed[0]]
    assert served == list(range(len(served)))  # partition 0: each offset once, in order, until refused
    assert all(acked[(0, o)] == v for o, v in live.consumed[0])
    broker.close()

    restarted = make_broker()
    with pytest.raises(DataChangedOutside, match="beyond the log end offset|both hold offsets"):
        restarted.fetch("t", 0, 0)
    assert read_all(restarted, "t", range(1, PARTITIONS)) == others
    stored = topic_offsets(make_broker.root, "t", make_broker.storage)  # type: ignore[attr-defined]
    for p in range(1, PARTITIONS):
        assert stored[p] == sorted(o for q, o in acked if q == p)
    # Partition 0's records acknowledged on the journal after the outside append wait there: the repair
    # removes what was appended beyond the log end, and the next start puts them in at their offsets.
    assert [r.partition for r in restarted.repair_topic("t")] == [0]
    restarted.close()
    repaired = make_broker()
    assert read_all(repaired, "t") == acked
    stored = topic_offsets(make_broker.root, "t", make_broker.storage)  # type: ignore[attr-defined]
    assert stored[0] == sorted(o for p, o in acked if p == 0)  # nothing from outside, nothing lost


OUTSIDE_CHANGES = {
    "delete": 'dt.delete("partition = 0 AND offset = 3")',
    "update": 'dt.update({"timestamp_type": "1"}, predicate="partition = 0 AND offset = 2")',
    "merge": """(dt.merge(rows(0, [4], b"merged"), predicate="t.partition = s.partition AND t.offset = s.offset",
          source_alias="s", target_alias="t").when_matched_update_all().execute())""",
    "overwrite": 'write_deltalake(dt, rows(0, range(0, 3)), mode="overwrite")',
    "restore": "dt.restore(1)",
}


@pytest.mark.parametrize("change", sorted(OUTSIDE_CHANGES))
def test_a_data_change_from_outside_refuses_the_partitions_it_touched(tmp_path, change: str) -> None:
    root = str(tmp_path / "data")
    with Broker(Settings(root=root, linger_ms=2)) as broker:
        broker.create_topic("t", PARTITIONS)
        broker.create_topic("apart", 1)
        for i in range(4):
            broker.produce("t", batch(12, f"flush{i}"))
            broker.produce("apart", batch(3, f"flush{i}"))
        read_all(broker, "t")  # the node's view is current and served
        delta_rs(broker, "t", OUTSIDE_CHANGES[change])
        # The node finds the change when its view moves past that commit: here, the table commit of its next
        # produce (acknowledged on the journal, where it waits for the repair); the produce after is refused.
        broker.produce("t", pa.table({"value": [b"x"], "partition": [0]}))
        with pytest.raises(DataChangedOutside, match=r"changed outside lakelog: .* \(dataChange=true\)"):
            broker.produce("t", pa.table({"value": [b"y"], "partition": [0]}))
        with pytest.raises(DataChangedOutside):
            broker.fetch("t", 0, 0)
        assert len(read_all(broker, "apart", range(1))) == 12  # another topic is untouched
    assert_topic_intact(root, "apart")


def test_lakelogs_roll_rewrites_another_tools_file_into_files_of_one_partition(tmp_path) -> None:
    root = str(tmp_path / "data")
    with Broker(Settings(root=root, linger_ms=2)) as broker:
        broker.create_topic("t", PARTITIONS)
        for i in range(6):
            broker.produce("t", batch(20, f"flush{i}"))
        sent = read_all(broker, "t")
        delta_rs(broker, "t", "dt.optimize.z_order(['key'])")
        assert read_all(broker, "t") == sent
        log = broker.topic_log("t")
        assert all(s.by_content for p in range(PARTITIONS) for s in log.segments(p))
        report = run_job("roll", broker)
        assert report.commits == 1 and report.files_added == PARTITIONS
        assert all(not s.shared for p in range(PARTITIONS) for s in log.segments(p))
        assert read_all(broker, "t") == sent
        broker.produce("t", batch(5, "after"))  # lakelog's own roll commit refused nothing
    assert_topic_intact(root, "t")
