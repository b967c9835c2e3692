"""Idempotent producers and Idempotency-Keys with two writers of one topic (issue 11: correctness never
depends on leadership). A retry sent to the node that did not write the batch, whose producer state or
snapshot is stale, is answered with the original offsets and never written a second time."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from lakelog.platform import Broker, ProducerBatch, Record
from lakelog.platform.errors import IdempotencyKeyReused
from lakelog.platform.records import idempotency_key_batch
from lakelog.platform.storage import Storage
from log_check import assert_topic_intact

PID = 4242


def _records(*values: str, partitions: int = 2) -> list[Record]:
    return [Record(v.encode(), partition=i % partitions) for i, v in enumerate(values)]


def _batches(root: str, topic: str, storage: dict | None = None) -> Counter:
    """How often each (producer_id, sequence) is stored, read from the data files the snapshot names."""
    store = Storage.open(root, storage)
    uri = store.uri("topics", topic)
    table = DeltaTable(uri, storage_options=store.delta_options())
    seen: Counter = Counter()
    for path in table.get_add_actions(flatten=True).column("path").to_pylist():
        with store.open_input(f"{uri}/{path}") as source:
            rows = pq.read_table(source, columns=["producer_id", "sequence"])
        rows = rows.filter(pc.is_valid(rows.column("producer_id")))
        seen.update(zip(rows.column("producer_id").to_pylist(), rows.column("sequence").to_pylist()))
    return seen


@pytest.fixture
def two_nodes(make_broker) -> tuple[Broker, Broker]:
    a, b = make_broker(), make_broker()
    a.create_topic("t", 2)
    b.topic("t")  # B opens the topic now: its snapshot is stale once A commits
    return a, b


@pytest.mark.parametrize("b_refreshed", [False, True], ids=["stale-snapshot", "fresh-snapshot"])
def test_a_retry_through_the_other_node_with_warm_state_is_answered_with_the_original_offsets(
        two_nodes: tuple[Broker, Broker], make_broker, b_refreshed: bool) -> None:
    a, b = two_nodes
    b.produce("t", _records("s0", "s1"), producer=ProducerBatch(PID, 0, 0))  # B's state: next sequence 2
    a.topic_log("t").refresh()
    first = a.produce("t", _records("s2", "s3", "s4"), producer=ProducerBatch(PID, 0, 2))
    if b_refreshed:  # B's snapshot holds A's commit, but its producer state does not
        b.topic_log("t").refresh()
    retried = b.produce("t", _records("s2", "s3", "s4"), producer=ProducerBatch(PID, 0, 2))
    assert retried.duplicate
    assert retried.records() == first.records()
    b.produce("t", _records("s5"), producer=ProducerBatch(PID, 0, 5))  # B goes on from the log's position
    assert a.produce("t", _records("s5"), producer=ProducerBatch(PID, 0, 5)).duplicate
    assert _batches(make_broker.root, "t", make_broker.storage) == Counter({(PID, s): 1 for s in range(6)})
    assert_topic_intact(make_broker.root, "t", make_broker.storage)


def test_a_retry_through_the_other_node_that_never_saw_the_producer(two_nodes, make_broker) -> None:
    a, b = two_nodes
    first = a.produce("t", _records("x", "y"), producer=ProducerBatch(PID, 3, 0))
    retried = b.produce("t", _records("x", "y"), producer=ProducerBatch(PID, 3, 0))
    assert retried.duplicate and retried.records() == first.records()
    assert _batches(make_broker.root, "t", make_broker.storage) == Counter({(PID, 0): 1, (PID, 1): 1})
    assert_topic_intact(make_broker.root, "t", make_broker.storage)


def test_an_idempotency_key_retried_through_the_other_node_is_written_once(two_nodes, make_broker) -> None:
    a, b = two_nodes
    key = idempotency_key_batch("order-17")
    b.produce("t", _records("warm"), producer=idempotency_key_batch("order-16"))  # B has written before
    a.topic_log("t").refresh()
    first = a.produce("t", _records("v1", "v2"), producer=key)
    retried = b.produce("t", _records("v1", "v2"), producer=key)
    assert retried.duplicate and retried.records() == first.records()
    with pytest.raises(IdempotencyKeyReused):
        b.produce("t", _records("other"), producer=key)
    log = b.topic_log("t")
    log.refresh()
    assert sum(log.log_end_offset(p) for p in range(2)) == 3
    assert _batches(make_broker.root, "t", make_broker.storage)[(key.producer_id, 0)] == 1
    assert_topic_intact(make_broker.root, "t", make_broker.storage)


def test_a_node_far_behind_forgets_all_producer_state_instead_of_reading_every_commit(
        two_nodes, make_broker, monkeypatch) -> None:
    monkeypatch.setattr("lakelog.platform.log.producers.FOREIGN_VERSIONS_MAX", 2)
    a, b = two_nodes
    b.produce("t", _records("s0"), producer=ProducerBatch(PID, 0, 0))
    a.topic_log("t").refresh()
    for i in range(3):  # more commits by A than B reads one by one
        a.produce("t", _records(f"plain{i}"))
    first = a.produce("t", _records("s1"), producer=ProducerBatch(PID, 0, 1))
    b.topic_log("t").refresh()
    retried = b.produce("t", _records("s1"), producer=ProducerBatch(PID, 0, 1))
    assert retried.duplicate and retried.records() == first.records()
    assert _batches(make_broker.root, "t", make_broker.storage) == Counter({(PID, 0): 1, (PID, 1): 1})
    assert_topic_intact(make_broker.root, "t", make_broker.storage)


# Sends every batch of PRODUCERS producers and KEYS Idempotency-Keys in order, each as the same request the
# other process sends (a client retrying through the other node), and prints what it was answered.
HAMMER = """
import json, sys
from lakelog.platform import Broker, ProducerBatch, Record
from lakelog.platform.records import idempotency_key_batch
from lakelog.settings import Settings
root, storage, producers, batches, keys = sys.argv[1], json.loads(sys.argv[2]), *map(int, sys.argv[3:6])
broker = Broker(Settings(root=root, storage=storage, linger_ms=1))
broker.topic("h")
print("ready", flush=True)
sys.stdin.readline()
for b in range(batches):
    for pid in range(1, producers + 1):
        records = [Record(f"{pid}-{b}-{i}".encode(), partition=(pid + i) % 3) for i in range(3)]
        result = broker.produce("h", records, producer=ProducerBatch(pid, 0, 3 * b), timeout_ms=60_000)
        print(json.dumps({"batch": [pid, b], "at": result.records()}), flush=True)
    if b < keys:
        key = idempotency_key_batch(f"key-{b}")
        result = broker.produce("h", [Record(f"k{b}".encode())], producer=key, timeout_ms=60_000)
        print(json.dumps({"batch": [key.producer_id, 0], "at": result.records()}), flush=True)
broker.close()
"""


@pytest.mark.slow
def test_two_processes_retrying_the_same_producers_write_each_batch_once(make_broker) -> None:
    producers, batches, keys = 3, 12, 6
    make_broker().create_topic("h", 3)
    root, storage = make_broker.root, make_broker.storage
    procs = [subprocess.Popen([sys.executable, "-c", HAMMER, root, json.dumps(storage), str(producers),
                               str(batches), str(keys)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()  # type: ignore[union-attr]
    for proc in procs:
        proc.stdin.write("go\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
    answers: list[dict] = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        answers.append({tuple(line["batch"]): line["at"] for line in map(json.loads, out.splitlines())})
    assert answers[0] == answers[1]  # both nodes answered every batch with the same offsets
    assert len(answers[0]) == producers * batches + keys
    stored = _batches(root, "h", storage)
    assert set(stored.values()) == {1}, [k for k, n in stored.items() if n > 1]
    assert len(stored) == producers * batches * 3 + keys
    assert sum(len(at) for at in answers[0].values()) == len(stored)
    assert_topic_intact(root, "h", storage)
