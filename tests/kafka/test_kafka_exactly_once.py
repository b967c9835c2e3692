"""Consume-transform-produce exactly once through a SIGKILL of the processor: a confluent-kafka process
reads `in` (read_committed, group `ctp`), writes one `out` record per input and commits the group's offsets
in the same transaction, a few inputs per transaction. It is SIGKILLed mid-way and started again with the
same transactional.id (which fences the dead one and aborts its open transaction). The scan: every input's
output is in the `out` table exactly once, no aborted record is, the group's committed offset is the input
count, and the offset scan passes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from deltalake import DeltaTable

from tests.delta_readers import assert_duckdb_agrees
from tests.http.conftest import start_server  # noqa: F401  (the fixture)
from tests.kafka.test_kafka_transactions import create_topics
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

REPO = Path(__file__).resolve().parents[2]
INPUTS = 60
PER_TRANSACTION = 4


def processor_main(bootstrap: str) -> None:
    """The processor: until its group's position reaches INPUTS, one transaction per few inputs."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ctp-1"})
    producer.init_transactions(STUCK_S)
    consumer.subscribe(["in"])
    while True:
        messages = [m for m in consumer.consume(PER_TRANSACTION, 1.0) if m.error() is None]
        if messages:
            producer.begin_transaction()
            for message in messages:
                producer.produce("out", value=b"out-" + message.value(), partition=0)
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), STUCK_S)
            producer.commit_transaction(STUCK_S)
            time.sleep(0.05)  # room for the kill to land mid-way
        positions = consumer.position([TopicPartition("in", 0)])
        if positions[0].offset >= INPUTS:
            break
    consumer.close()


def start_processor(bootstrap: str, log: Path) -> subprocess.Popen:
    script = "import sys; from tests.kafka.test_kafka_exactly_once import processor_main; processor_main(sys.argv[1])"
    paths = [str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]  # as pytest finds the helpers
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.Popen([sys.executable, "-c", script, bootstrap], cwd=REPO, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(log, "ab"))


def out_values(root: str) -> list[bytes]:
    return DeltaTable(f"{root}/topics/out").to_pyarrow_table(columns=["value"]).column("value").to_pylist()


def test_consume_transform_produce_exactly_once_through_a_sigkill(start_server, tmp_path) -> None:  # noqa: F811
    server = start_server()
    create_topics(server.bootstrap, "in", "out")
    plain = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(INPUTS):
        plain.produce("in", value=b"in-%d" % i, partition=0)
    assert plain.flush(STUCK_S) == 0

    log = tmp_path / "processor.log"
    first = start_processor(server.bootstrap, log)
    deadline = time.monotonic() + STUCK_S
    while len(out_values(server.root)) < INPUTS // 3 and time.monotonic() < deadline:
        assert first.poll() is None, log.read_text()
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait(STUCK_S)
    killed_at = len(out_values(server.root))
    assert killed_at < INPUTS, "the processor finished before the kill"

    second = start_processor(server.bootstrap, log)
    assert second.wait(STUCK_S) == 0, log.read_text()[-3000:]

    produced = Counter(out_values(server.root))
    assert produced == Counter(b"out-in-%d" % i for i in range(INPUTS)), (
        f"missing {sorted(set(b'out-in-%d' % i for i in range(INPUTS)) - set(produced))[:5]}, "
        f"twice {[v for v, n in produced.items() if n > 1][:5]}")
    committed = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "ctp"}).committed(
        [TopicPartition("in", 0)], STUCK_S)
    assert committed[0].offset == INPUTS  # the group's offsets went with the outputs

    end = time.monotonic() + STUCK_S
    while time.monotonic() < end:
        try:
            assert_topic_intact(server.root, "out")
            break
        except AssertionError:
            time.sleep(0.2)  # a transaction the kill left open is aborted by the new producer or its timeout
    assert_topic_intact(server.root, "out")
    assert_duckdb_agrees(server.root, "out")
