"""The client's pure parts: idempotent sequences, the producer's batching decisions, rebalance plans."""

from __future__ import annotations

import subprocess
import sys

from lakelog.client.batching import Accumulator, Pending
from lakelog.client.consumer import join_body
from lakelog.client.rebalance import changes
from lakelog.client.sequences import IDEMPOTENCY_BASE, MAX_EPOCH, MAX_SEQUENCE, Sequences


def test_sequences_run_per_topic_and_are_spent_only_when_delivered() -> None:
    seq = Sequences(producer_id=7)
    assert seq.reserve("a", 3) == (7, 0, 0)
    assert seq.reserve("a", 3) == (7, 0, 0)  # a retry reuses the same range
    seq.delivered("a", 0, 0, 3)
    assert seq.reserve("a", 2) == (7, 0, 3)
    assert seq.reserve("b", 1) == (7, 0, 0)


def test_an_unknown_outcome_moves_to_a_new_epoch_from_zero() -> None:
    seq = Sequences(producer_id=7)
    seq.delivered("a", 0, 0, 10)
    seq.bump_epoch()
    assert seq.reserve("a", 1) == (7, 1, 0)
    seq.delivered("a", 0, 10, 5)  # a late answer of the old epoch changes nothing
    assert seq.next_sequence("a") == 0


def test_sequence_wrap_and_epoch_exhaustion() -> None:
    seq = Sequences(producer_id=7, epoch=MAX_EPOCH)
    seq.delivered("a", MAX_EPOCH, 0, MAX_SEQUENCE - 1)
    producer_id, epoch, base = seq.reserve("a", 5)
    assert (epoch, base) == (0, 0) and producer_id != 7 and 0 <= producer_id < IDEMPOTENCY_BASE


def test_random_producer_ids_stay_below_the_idempotency_key_range() -> None:
    assert all(Sequences().producer_id < IDEMPOTENCY_BASE for _ in range(1000))


def pending(topic: str, at: float, size: int = 10, table: bool = False) -> Pending:
    return Pending(topic, size, at, record=None if table else {}, table=b"x" if table else None)


def test_linger_batch_size_and_flush_decide_readiness() -> None:
    acc = Accumulator(linger_s=0.05, batch_bytes=100, batch_messages=1000)
    acc.add(pending("a", 0.0))
    assert acc.ready(0.01) == [] and abs(acc.next_due(0.01) - 0.04) < 1e-9
    assert acc.ready(0.06) == ["a"]
    assert acc.ready(0.01, flushing=True) == ["a"]
    for _ in range(9):
        acc.add(pending("b", 0.0))
    assert acc.ready(0.0) == []
    acc.add(pending("b", 0.0))
    assert acc.ready(0.0) == ["b"]  # 100 bytes: full


def test_drain_respects_batch_size_and_sends_tables_alone() -> None:
    acc = Accumulator(linger_s=0, batch_bytes=25, batch_messages=1000)
    for _ in range(3):
        acc.add(pending("a", 0.0))
    acc.add(pending("a", 0.0, table=True))
    acc.add(pending("a", 0.0))
    assert len(acc.drain("a")) == 2
    assert len(acc.drain("a")) == 1
    assert [p.table for p in acc.drain("a")] == [b"x"]
    assert len(acc.drain("a")) == 1 and acc.drain("a") == [] and len(acc) == 0


def test_a_record_larger_than_batch_size_still_goes() -> None:
    acc = Accumulator(linger_s=0, batch_bytes=5, batch_messages=1000)
    acc.add(pending("a", 0.0, size=50))
    assert len(acc.drain("a")) == 1


A, B, C = ("t", 0), ("t", 1), ("t", 2)


def test_eager_revokes_everything_but_gives_up_only_what_left() -> None:
    plan = changes({A, B}, {B, C}, set(), cooperative=False)
    assert plan.revoke == {A, B} and plan.give_up == {A} and plan.assign == {B, C} and plan.target == {B, C}
    assert changes({A}, {A}, set(), cooperative=False).assign is None
    assert changes(set(), None, set(), cooperative=False).assign is None


def test_cooperative_revokes_what_the_server_asks_back_and_assigns_only_new() -> None:
    plan = changes({A, B, C}, {A}, {B, C}, cooperative=True)
    assert plan.revoke == {B, C} and plan.give_up == {B, C} and plan.assign is None and plan.target == {A}
    plan = changes({A}, {A, B}, set(), cooperative=True)
    assert plan.revoke == set() and plan.assign == {B} and plan.target == {A, B}
    first = changes(set(), {A, B}, set(), cooperative=True)
    assert first.assign == {A, B}


def test_join_body_uses_kafka_names_and_patterns() -> None:
    config = {"session.timeout.ms": 6000, "max.poll.interval.ms": 1000, "enable.auto.commit": False,
              "group.instance.id": "i-1"}
    body = join_body(config, "earliest", "range", ["orders", "^audit-.*"])
    assert body["pattern"] == r"orders|(?:audit-.*)" and "topics" not in body
    assert body["auto.offset.reset"] == "earliest" and body["group.instance.id"] == "i-1"
    assert join_body(config, "latest", "range", ["orders"])["topics"] == ["orders"]


def test_the_client_imports_neither_the_server_nor_the_core() -> None:
    code = ("import sys, lakelog.client; print(sorted(m for m in sys.modules if m.startswith("
            "('fastapi', 'lakelog.ingest_api', 'lakelog.platform', 'pyspark'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
