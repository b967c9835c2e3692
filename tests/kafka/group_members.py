"""The members of tests/kafka/test_kafka_group_moves.py: one poll-journal-commit loop (`member_loop`) over
three Kafka clients (kafka-python, confluent-kafka, aiokafka), run in a thread of the test process
(`ThreadMember`) or in a subprocess that can be SIGKILLed (`ProcessMember`, which runs `member_main`).

A member journals what it processed (a JSON line each, written through before it commits), then commits
those partitions synchronously; a partition whose commit failed is committed again (at the client's
position) while the member still owns it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
SESSION_MS = 6000  # a SIGKILLed member is noticed after this
HEARTBEAT_MS = 1000
MAX_POLL_MS = 20_000  # also the rebalance timeout: a join phase never waits longer for a member
BATCH = 50  # records per poll at most


# ---- the members: one loop, three clients --------------------------------------------------------------


class Journal:
    """A member's events, a JSON line each, handed to the OS as written: a SIGKILLed member's file still
    holds everything it processed before it committed."""

    def __init__(self, path: Path | str) -> None:
        self.file = open(path, "a", buffering=1)

    def processed(self, records: list[tuple[int, int]]) -> None:
        self.file.write(json.dumps({"t": time.monotonic(), "processed": records}) + "\n")

    def committed(self, offsets: dict[int, int], error: str | None) -> None:
        self.file.write(json.dumps({"t": time.monotonic(), "commit": offsets, "error": error}) + "\n")

    def close(self) -> None:
        self.file.close()


def member_loop(consumer: Any, journal: Journal, stop: threading.Event, process_s: float = 0) -> None:
    """Poll, journal, take `process_s` to process a batch, commit synchronously what the batch processed
    (plus any owned partition whose last commit failed), until `stop`; then close the consumer, which
    leaves the group."""
    dirty: set[int] = set()  # owned partitions whose last commit failed
    try:
        while not stop.is_set():
            records = consumer.poll()
            if records:
                journal.processed(records)
                time.sleep(process_s)  # the uncommitted window, made wide enough to be killed in
            offsets: dict[int, int] = {}
            for partition, offset in records:
                offsets[partition] = max(offsets.get(partition, 0), offset + 1)
            owned = consumer.assigned()
            dirty &= owned  # a lost partition's new owner starts from the committed offset anyway
            for partition in dirty - offsets.keys():
                position = consumer.position(partition)
                if position is not None and position >= 0:
                    offsets[partition] = position
            if not offsets:
                continue
            try:
                consumer.commit(offsets)
            except Exception as exc:  # e.g. REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION: the window stays open
                journal.committed(offsets, repr(exc)[:300])
                dirty |= offsets.keys()
            else:
                journal.committed(offsets, None)
                dirty -= offsets.keys()
    finally:
        consumer.close()
        journal.close()


@dataclass(frozen=True)
class Config:
    assignor: str
    bootstrap: str
    topic: str
    group: str
    client_id: str  # the member id the coordinator gives starts with it: how HTTP descriptions name roles
    process_ms: int = 0  # how long processing a batch takes (between its journal line and its commit)


class KafkaPythonMember:
    def __init__(self, c: Config) -> None:
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        strategy = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                    "cooperative-sticky": CooperativeStickyAssignor}[c.assignor]
        self.topic = c.topic
        self.consumer = KafkaConsumer(
            c.topic, bootstrap_servers=c.bootstrap, group_id=c.group, client_id=c.client_id,
            auto_offset_reset="earliest", enable_auto_commit=False, partition_assignment_strategy=[strategy],
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS, max_poll_interval_ms=MAX_POLL_MS,
            max_poll_records=BATCH)

    def poll(self) -> list[tuple[int, int]]:
        return [(r.partition, r.offset) for rs in self.consumer.poll(timeout_ms=200).values() for r in rs]

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def position(self, partition: int) -> int | None:
        from kafka import TopicPartition

        return self.consumer.position(TopicPartition(self.topic, partition))

    def commit(self, offsets: dict[int, int]) -> None:
        from kafka import OffsetAndMetadata, TopicPartition

        self.consumer.commit({TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})

    def close(self) -> None:
        self.consumer.close()


class ConfluentMember:
    def __init__(self, c: Config) -> None:
        from confluent_kafka import Consumer

        self.topic = c.topic
        self.consumer = Consumer({
            "bootstrap.servers": c.bootstrap, "group.id": c.group, "client.id": c.client_id,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "partition.assignment.strategy": c.assignor, "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS, "max.poll.interval.ms": MAX_POLL_MS})
        self.consumer.subscribe([c.topic])

    def poll(self) -> list[tuple[int, int]]:
        return [(m.partition(), m.offset()) for m in self.consumer.consume(BATCH, 0.2) if not m.error()]

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def position(self, partition: int) -> int | None:
        from confluent_kafka import TopicPartition

        return self.consumer.position([TopicPartition(self.topic, partition)])[0].offset

    def commit(self, offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        answered = self.consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                                        asynchronous=False)
        failed = [(tp.partition, str(tp.error)) for tp in answered or [] if tp.error]
        if failed:
            raise RuntimeError(f"commit refused: {failed}")

    def close(self) -> None:
        self.consumer.close()


class AioKafkaMember:
    """aiokafka on an event loop of its own, run only inside this member's calls (its heartbeats too:
    the loop never stops for more than a journal write)."""

    def __init__(self, c: Config) -> None:
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        strategy = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[c.assignor]
        self.topic = c.topic
        self.loop = asyncio.new_event_loop()

        async def start() -> Any:
            from aiokafka import AIOKafkaConsumer

            consumer = AIOKafkaConsumer(
                c.topic, bootstrap_servers=c.bootstrap, group_id=c.group, client_id=c.client_id,
                auto_offset_reset="earliest", enable_auto_commit=False, partition_assignment_strategy=(strategy,),
                session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                max_poll_interval_ms=MAX_POLL_MS)
            await consumer.start()
            return consumer

        self.consumer = self.loop.run_until_complete(start())

    def poll(self) -> list[tuple[int, int]]:
        batches = self.loop.run_until_complete(self.consumer.getmany(timeout_ms=200, max_records=BATCH))
        return [(r.partition, r.offset) for rs in batches.values() for r in rs]

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def position(self, partition: int) -> int | None:
        from aiokafka import TopicPartition

        return self.loop.run_until_complete(self.consumer.position(TopicPartition(self.topic, partition)))

    def commit(self, offsets: dict[int, int]) -> None:
        from aiokafka import TopicPartition

        self.loop.run_until_complete(self.consumer.commit({TopicPartition(self.topic, p): o
                                                           for p, o in offsets.items()}))

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.consumer.stop())
        finally:
            self.loop.close()


MEMBERS: dict[str, Callable[[Config], Any]] = {
    "kafka-python": KafkaPythonMember, "confluent-kafka": ConfluentMember, "aiokafka": AioKafkaMember}


def member_main(argv: list[str]) -> None:
    """The killed member's subprocess: client, journal path, Config as JSON."""
    client, journal, config = argv[0], argv[1], Config(**json.loads(argv[2]))
    member_loop(MEMBERS[client](config), Journal(journal), threading.Event(), config.process_ms / 1000)


class ThreadMember:
    def __init__(self, client: str, config: Config, journal: Path) -> None:
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(client, config, journal), daemon=True,
                                       name=config.client_id)
        self.thread.start()

    def _run(self, client: str, config: Config, journal: Path) -> None:
        try:
            member_loop(MEMBERS[client](config), Journal(journal), self.stop, config.process_ms / 1000)
        except BaseException as exc:
            self.error = exc

    def close(self, timeout_s: float = 30) -> None:
        self.stop.set()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), f"{self.thread.name} did not close"
        assert self.error is None, f"{self.thread.name} failed: {self.error!r}"


class ProcessMember:
    def __init__(self, client: str, config: Config, journal: Path, stderr: Path) -> None:
        script = "import sys; from tests.kafka.group_members import member_main; member_main(sys.argv[1:])"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.stderr = open(stderr, "wb")
        argv = [sys.executable, "-c", script, client, str(journal), json.dumps(asdict(config))]
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.stderr)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.stderr.close()
