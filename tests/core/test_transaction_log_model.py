"""The log's reservations and fills against a model, on a real topic log (local root): producers reserve
offsets for transactional batches, ordinary appends go on between them, transactions commit or abort in any
order. After every step: the last stable offset is the oldest open transaction's first offset (or the log
end), and a consumer reading from the log start gets exactly the committed records below it, in offset
order, each at the offset its batch was given. At the end every open transaction aborts and the offset
scan passes with the table holding exactly the committed records."""

from __future__ import annotations

import shutil
import tempfile

import pyarrow as pa
from deltalake import DeltaTable
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from lakelog.platform import Broker, Record
from lakelog.platform.deadline import Deadline
from lakelog.platform.log.reservations import StagedBatch
from lakelog.platform.records import Marker
from lakelog.schemas import TOPIC_FILE_SCHEMA
from log_check import assert_topic_intact

PRODUCERS = (1, 2, 3)


def batch_table(values: list[bytes]) -> pa.Table:
    n = len(values)
    return pa.table({
        "offset": pa.array([0] * n, pa.int64()),
        "timestamp": pa.array([1_700_000_000_000] * n, pa.timestamp("ms", tz="UTC")),
        "timestamp_type": pa.array([0] * n, pa.int8()),
        "key": pa.array([None] * n, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "headers": pa.array([[]] * n, TOPIC_FILE_SCHEMA.field("headers").type),
        "producer_id": pa.array([None] * n, pa.int64()),
        "producer_epoch": pa.array([None] * n, pa.int16()),
        "sequence": pa.array([None] * n, pa.int32()),
    }).select(TOPIC_FILE_SCHEMA.names).cast(TOPIC_FILE_SCHEMA)


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp()
        self.root = f"{self.folder}/data"
        self.broker = Broker(root=self.root)
        self.broker.create_topic("t", 1)
        self.log = self.broker.topic_log("t")
        self.committed: dict[int, bytes] = {}  # offset -> value, in the table
        self.number = {p: 0 for p in PRODUCERS}  # each producer's current (or last) transaction
        self.open: dict[int, list[tuple[int, int, list[bytes]]]] = {}  # producer -> (sequence, first, values)
        self.counter = 0

    def _values(self, count: int) -> list[bytes]:
        self.counter += 1
        return [b"%d-%d" % (self.counter, i) for i in range(count)]

    @rule(count=st.integers(1, 3))
    def append(self, count: int) -> None:
        values = self._values(count)
        offsets = self.broker.produce("t", [Record(v) for v in values], acks=1).offsets
        self.committed.update({int(o): v for o, v in zip(offsets, values)})

    @rule(producer=st.sampled_from(PRODUCERS), count=st.integers(1, 3), retry=st.booleans())
    def reserve(self, producer: int, count: int, retry: bool) -> None:
        if producer not in self.open:
            self.number[producer] += 1
            self.open[producer] = []
        batches = self.open[producer]
        values = self._values(count)
        sequence = len(batches)
        first = self.log.reserve(0, count, producer, self.number[producer], sequence, Deadline.after_ms(30_000))
        assert first == self.log.log_end_offset(0) - count  # taken at the log end
        if retry:  # the same batch again: the same offsets, nothing more taken
            assert self.log.reserve(0, count, producer, self.number[producer], sequence,
                                    Deadline.after_ms(30_000)) == first
        batches.append((sequence, first, values))

    @rule(producer=st.sampled_from(PRODUCERS), commit=st.booleans())
    def end(self, producer: int, commit: bool) -> None:
        batches = self.open.pop(producer, None)
        if batches is None:
            return
        staged = [StagedBatch(seq, len(values), (lambda values=values: batch_table(values)) if commit else None)
                  for seq, _, values in batches]
        marker = self.log.log_end_offset(0)
        assert self.log.fill(0, producer, self.number[producer], staged, Deadline.after_ms(30_000), producer, commit)
        assert self.log.log_end_offset(0) == marker + 1  # the marker's offset, taken at the log end
        assert self.log.marker_at(0, marker) == Marker(marker, producer, commit)
        if commit:
            for _, first, values in batches:
                self.committed.update({first + i: v for i, v in enumerate(values)})

    @invariant()
    def stable_offset_and_reads_match_the_model(self) -> None:
        firsts = [first for batches in self.open.values() for _, first, _ in batches]
        end = self.log.log_end_offset(0)
        stable = min(firsts) if firsts else end
        assert self.log.last_stable_offset(0) == stable
        read: dict[int, bytes] = {}
        offset = self.log.log_start_offset(0)
        while True:
            result = self.broker.fetch("t", 0, offset, 1000)
            if result.next_offset is None:
                break
            read.update(zip(result.records.column("offset").to_pylist(), result.records.column("value").to_pylist()))
            offset = result.next_offset
        assert read == {o: v for o, v in self.committed.items() if o < stable}

    def teardown(self) -> None:
        try:
            for producer in list(self.open):
                self.end(producer, commit=False)
            self.broker.close()
            assert_topic_intact(self.root, "t")
            table = DeltaTable(f"{self.root}/topics/t").to_pyarrow_table(columns=["offset", "value"])
            assert dict(zip(table.column("offset").to_pylist(), table.column("value").to_pylist())) == self.committed
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


TestLogModel = LogModel.TestCase
TestLogModel.settings = settings(max_examples=12, stateful_step_count=20, deadline=None)
