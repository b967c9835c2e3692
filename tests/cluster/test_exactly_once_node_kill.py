"""Consume-transform-produce exactly once on a three-node cluster through a SIGKILL of the node that
coordinates the processor's transactional id: the processor (tests/kafka/test_kafka_exactly_once.py's, in
its own process, bootstrapped at all three nodes) goes on against the two survivors, one of which takes the
id over and completes or aborts what the dead node left. The scan: every input's output exactly once in the
`out` table, the group's committed offset is the input count, the offset scan passes."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition

from lakelog.platform.cluster.ownership import owner, transaction_key
from tests.cluster.cluster_nodes import Node, settled, views, wait_until
from tests.kafka.test_kafka_exactly_once import INPUTS, out_values, start_processor
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

NAMES = ("n1", "n2", "n3")


def test_exactly_once_through_a_sigkill_of_the_transaction_coordinator(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    nodes = [Node(root, name, {}) for name in NAMES]
    try:
        for node in nodes:
            node.start()
        wait_until(lambda: settled(nodes) is not None, STUCK_S, lambda: views(nodes))
        for topic in ("in", "out"):
            httpx.post(nodes[0].url + "/v1/topics", json={"name": topic, "partitions": 1},
                       timeout=STUCK_S).raise_for_status()
        wait_until(lambda: len((settled(nodes) or {}).get("topics", {})) == 2, STUCK_S, lambda: views(nodes))
        plain = Producer({"bootstrap.servers": nodes[0].bootstrap})
        for i in range(INPUTS):
            plain.produce("in", value=b"in-%d" % i, partition=0)
        assert plain.flush(STUCK_S) == 0

        bootstrap = ",".join(node.bootstrap for node in nodes)
        log = tmp_path / "processor.log"
        processor = start_processor(bootstrap, log)
        deadline = time.monotonic() + STUCK_S
        while len(out_values(root)) < INPUTS // 3 and time.monotonic() < deadline:
            assert processor.poll() is None, log.read_text()[-3000:]
            time.sleep(0.05)
        doomed = next(n for n in nodes if n.name == owner(transaction_key("ctp-1"), list(NAMES)))
        assert len(out_values(root)) < INPUTS and processor.poll() is None  # the kill lands mid-way
        doomed.signal(signal.SIGKILL)
        doomed.proc.wait(STUCK_S)  # type: ignore[union-attr]
        survivors = [n for n in nodes if n is not doomed]
        assert processor.wait(STUCK_S) == 0, log.read_text()[-3000:]

        produced = Counter(out_values(root))
        assert produced == Counter(b"out-in-%d" % i for i in range(INPUTS)), (
            f"missing {sorted(set(b'out-in-%d' % i for i in range(INPUTS)) - set(produced))[:5]}, "
            f"twice {[v for v, n in produced.items() if n > 1][:5]}\n"
            + "\n".join(f"{n.name}: {n.log_tail(4000)}" for n in nodes) + log.read_text()[-4000:])
        reader = Consumer({"bootstrap.servers": ",".join(n.bootstrap for n in survivors), "group.id": "ctp"})
        wait_until(lambda: reader.committed([TopicPartition("in", 0)], STUCK_S)[0].offset == INPUTS, STUCK_S,
                   "the group's offset committed with the last transaction")
        reader.close()
        end = time.monotonic() + STUCK_S
        while time.monotonic() < end:
            try:
                assert_topic_intact(root, "out")
                break
            except AssertionError:
                time.sleep(0.2)
        assert_topic_intact(root, "out")
    finally:
        for node in nodes:
            node.terminate()
