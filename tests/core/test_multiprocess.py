"""Several writer processes, and a writer killed with SIGKILL: offsets stay dense and unique."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from lakelog.platform import Broker
from lakelog.settings import Settings
from log_check import assert_topic_intact
from s3_latency import S3_STANDARD

SCRIPT = str(Path(__file__).with_name("producer_process.py"))
pytestmark = pytest.mark.slow


def _spawn(root: str, storage: dict, topic: str, name: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, SCRIPT, "--root", root, "--storage", json.dumps(storage), "--topic", topic,
         "--name", name, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _all_records(broker: Broker, topic: str, partitions: int) -> dict[int, list]:
    log = broker.topic_log(topic)
    log.refresh()
    out = {}
    for p in range(partitions):
        out[p] = list(broker.fetch(topic, p, 0, max_records=1_000_000))
    return out


def test_two_processes_append_to_the_same_partitions(make_broker) -> None:
    broker = make_broker()
    broker.create_topic("shared", 2)
    _two_writers(broker, make_broker.root, make_broker.storage, batches=40)


@pytest.mark.s3
def test_two_processes_append_behind_a_30_ms_round_trip(s3_proxy) -> None:
    """The commit race on object storage's latency: the loser of a version learns of it only from its
    failed put-if-absent, refreshes, and commits after the winner."""
    s3_proxy.delay = S3_STANDARD
    root = s3_proxy.root()
    with Broker(Settings(root=root, storage=s3_proxy.options)) as broker:
        broker.create_topic("shared", 2)
        _two_writers(broker, root, s3_proxy.options, batches=15)
    assert s3_proxy.counter.snapshot()["put_log"] >= 2 * 15  # every commit went through the delay


def _two_writers(broker: Broker, root: str, storage: dict, batches: int) -> None:
    """Two processes append `batches` batches of 5 to the same partitions; every ack is where it was said."""
    procs = [_spawn(root, storage, "shared", f"w{i}", "--batches", str(batches), "--batch-size", "5")
             for i in range(2)]
    acked = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        acked += [json.loads(line) for line in out.splitlines()]
    assert len(acked) == 2 * batches * 5
    records = _all_records(broker, "shared", 2)
    for p, fetched in records.items():
        assert [r.offset for r in fetched] == list(range(len(fetched)))  # dense, each offset once
    assert sum(len(r) for r in records.values()) == len(acked)
    at = {(r.partition, r.offset): r.value.decode() for rs in records.values() for r in rs}
    for ack in acked:  # every acknowledged record is readable at the offset it was given
        assert at[(ack["p"], ack["o"])] == ack["v"]
    log = broker.topic_log("shared")
    assert log.log_end_offset(0) + log.log_end_offset(1) == len(acked)
    assert_topic_intact(root, "shared", storage)


def test_sigkill_mid_stream_loses_no_ack_and_idempotent_producer_resumes(make_broker) -> None:
    broker = make_broker()
    broker.create_topic("crash", 3)
    batch_size = 7
    proc = _spawn(make_broker.root, make_broker.storage, "crash", "c", "--batch-size", str(batch_size),
                  "--partitions", "3", "--producer-id", "77")
    acked = []
    assert proc.stdout is not None
    for line in proc.stdout:
        acked.append(json.loads(line))
        if len(acked) >= 30 * batch_size:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    records = _all_records(broker, "crash", 3)
    at = {(r.partition, r.offset): r.value.decode() for rs in records.values() for r in rs}
    for ack in acked:
        assert at[(ack["p"], ack["o"])] == ack["v"]
    for fetched in records.values():
        assert [r.offset for r in fetched] == list(range(len(fetched)))
    batches = Counter(v.rsplit("-", 1)[0] for v in at.values())
    assert set(batches.values()) == {batch_size}  # no partial commit: whole batches or nothing
    last_acked_batch = max(a["b"] for a in acked)

    # A restarted producer resends from the batch after its last acknowledgement: the batch that
    # may have committed unacknowledged is answered as a duplicate, not written twice.
    resumed = _spawn(make_broker.root, make_broker.storage, "crash", "c", "--batch-size", str(batch_size),
                     "--partitions", "3", "--producer-id", "77", "--first-batch", str(last_acked_batch + 1),
                     "--batches", "5")
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    records = _all_records(broker, "crash", 3)
    values = [r.value.decode() for rs in records.values() for r in rs]
    assert len(values) == len(set(values))
    expected = {f"c-{b}-{i}" for b in range(last_acked_batch + 6) for i in range(batch_size)}
    assert set(values) == expected
    for fetched in records.values():
        assert [r.offset for r in fetched] == list(range(len(fetched)))
    assert_topic_intact(make_broker.root, "crash", make_broker.storage)
