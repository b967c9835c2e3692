"""What unmodified Kafka clients (kafka-python, confluent-kafka, aiokafka) do with a group's committed
offset outside the log (past its end, or below its start after retention): auto.offset.reset earliest
restarts at the log start, latest at the end, none/error surfaces OFFSET_OUT_OF_RANGE. Each client's way
of reporting the error is in tests/kafka/client_errors.py.
"""

from __future__ import annotations

from typing import Iterator

import httpx
import pytest

from lakelog.spark_jobs.jobs import run_job
from tests.http.conftest import ThreadServer, make_settings
from tests.kafka import client_errors
from tests.kafka.client_errors import create_topic, log_range, produce
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

client = client_errors.client  # the fixture: each test runs once per client

def commit(server: ThreadServer, group: str, topic: str, offset: int) -> None:
    response = httpx.post(f"{server.url}/v1/groups/{group}/offsets",
                          json={"offsets": [{"topic": topic, "partition": 0, "offset": offset}]}, timeout=STUCK_S)
    assert response.status_code == 200, response.text


# ---- committed offsets out of range ----------------------------------------------------------------


@pytest.fixture(scope="module")
def retained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ThreadServer, str]]:
    """One server, one topic whose first records retention removed: its log starts at 4."""
    server = ThreadServer(make_settings(tmp_path_factory.mktemp("retained"))).start()
    topic = "retained"
    create_topic(server, topic, **{"retention.bytes": 0})
    for i in range(3):  # three table commits, three files: retention keeps the active (last) one
        produce(server, topic, f"old-{2 * i}", f"old-{2 * i + 1}")
        server.settle()  # each call's own table commit, behind the journal's answer
    assert run_job("retention", server.app.state.services.broker, topics=[topic]).commits == 1
    assert log_range(server, topic) == (4, 6)
    yield server, topic
    assert_topic_intact(server.root, topic, allow_gaps=True)
    server.stop()


@pytest.mark.parametrize("committed", ["past-end", "below-start"])
@pytest.mark.parametrize("reset", ["earliest", "latest", "none"])
def test_committed_offset_out_of_range(retained, client, reset: str, committed: str) -> None:
    server, topic = retained
    group = f"{client.name}-{reset}-{committed}"
    start, end = log_range(server, topic)
    commit(server, group, topic, end + 100 if committed == "past-end" else start - 3)
    consumer = client.consumer(server.bootstrap, topic, group, reset)
    try:
        if reset == "earliest":
            got = consumer.records(count=end - start)
            assert [o for o, _ in got] == list(range(start, start + len(got)))  # from the log start
        elif reset == "latest":
            late: list[int] = []

            def produce_one() -> None:  # the reset's end is not known in advance: records keep coming
                late.extend(produce(server, topic, f"late-{len(late)}"))

            got = consumer.records(between=produce_one)
            first = got[0][0]
            assert first >= end and first in late  # from the end: nothing that was there before
            assert [o for o, _ in got] == list(range(first, first + len(got)))
            assert all(value.startswith(b"late-") for _, value in got)  # type: ignore[union-attr]
        else:
            client.check(consumer.error(), "OFFSET_OUT_OF_RANGE")
    finally:
        consumer.close()
