"""Transactions through a SIGKILL of the server: confluent-kafka's transactional producer commits (and every
fourth time aborts) transactions of three records to each of two topics, in a loop, while the lakelog
process is killed and started again on the same root and ports. Afterwards: every committed transaction's
six records are there once, no aborted transaction's record is, and a transaction whose outcome the
producer never learned is all or nothing across both topics (never half applied); read_committed and an
independent Delta reader agree; the offset scan passes once the transaction left open by the kill ended.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from confluent_kafka import KafkaException, Producer
from deltalake import DeltaTable

from tests.http.conftest import ProcessServer
from tests.kafka.test_kafka_transactions import create_topics, read_committed
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

TOPICS = ("x", "y")
RECORDS = 3  # per topic per transaction


def values(root: str, topic: str) -> list[bytes]:
    return DeltaTable(f"{root}/topics/{topic}").to_pyarrow_table(columns=["value"]).column("value").to_pylist()


class Loop:
    """The producer's loop in a thread: outcome per transaction, as the producer learned it."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.outcomes: dict[int, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def producer(self) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "crash",
                             "transaction.timeout.ms": 5000})
        producer.init_transactions(STUCK_S)
        return producer

    def run(self) -> None:
        producer: Producer | None = None
        number = 0
        while not self.stop.is_set():
            try:
                producer = producer or self.producer()
                producer.begin_transaction()
                for topic in TOPICS:
                    for k in range(RECORDS):
                        producer.produce(topic, value=b"%d-%d" % (number, k), partition=0)
                if number % 4 == 3:
                    producer.abort_transaction(STUCK_S)
                    self.outcomes[number] = "aborted"
                else:
                    producer.commit_transaction(STUCK_S)
                    self.outcomes[number] = "committed"
            except KafkaException as exc:
                error = exc.args[0]
                self.outcomes[number] = "unknown"
                if not error.fatal() and error.txn_requires_abort():
                    try:
                        producer.abort_transaction(STUCK_S)  # type: ignore[union-attr]
                        self.outcomes[number] = "aborted"
                    except KafkaException:
                        producer = None
                else:
                    producer = None  # fatal (fenced, or its state lost): a new producer fences the old one
            number += 1


def test_transactions_through_a_sigkill_of_the_server(tmp_path) -> None:
    server = ProcessServer(str(tmp_path / "root")).start()
    try:
        create_topics(server.bootstrap, *TOPICS)
        loop = Loop(server.bootstrap)
        loop.thread.start()
        deadline = time.monotonic() + STUCK_S
        while len(loop.outcomes) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        server.kill()  # mid-way through a transaction, most likely
        server.start()
        done_before = len(loop.outcomes)
        while len(loop.outcomes) < done_before + 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        loop.stop.set()
        loop.thread.join(STUCK_S)
        assert not loop.thread.is_alive()
        outcomes = loop.outcomes
        assert Counter(outcomes.values())["committed"] >= 8, outcomes

        committed = read_committed(server.bootstrap, list(TOPICS), "check",
                                   2 * RECORDS * Counter(outcomes.values())["committed"])
        for topic in TOPICS:
            stored = values(server.root, topic)
            assert len(stored) == len(set(stored)), f"{topic}: a record stored twice"
            assert sorted(stored) == sorted(v for t, _, v in committed if t == topic)  # Delta == read_committed
        seen = {(topic, v) for topic in TOPICS for v in values(server.root, topic)}
        for number, outcome in outcomes.items():
            present = {(topic, b"%d-%d" % (number, k)) in seen for topic in TOPICS for k in range(RECORDS)}
            if outcome == "committed":
                assert present == {True}, f"committed transaction {number} is not all there"
            elif outcome == "aborted":
                assert present == {False}, f"aborted transaction {number} left records"
            else:
                assert len(present) == 1, f"transaction {number} ({outcome}) is half applied"

        def intact() -> bool:
            try:
                for topic in TOPICS:
                    assert_topic_intact(server.root, topic)
                return True
            except AssertionError:
                return False

        end = time.monotonic() + STUCK_S
        while not intact() and time.monotonic() < end:
            time.sleep(0.2)  # a transaction the kill left open ends at its timeout
        for topic in TOPICS:
            assert_topic_intact(server.root, topic)
    finally:
        server.terminate()
