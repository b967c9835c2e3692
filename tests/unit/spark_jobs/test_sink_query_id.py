"""The streaming sink's exactly-once identity: the query id every task of a micro-batch reports."""

from __future__ import annotations

import pytest

from lakelog.platform.errors import InvalidConfig
from lakelog.spark_jobs.sink import SinkMessage, StagedFile, sink_query_id


def test_sink_query_id_is_the_one_all_tasks_report():
    files = [StagedFile("t", "u", 1)]
    assert sink_query_id([SinkMessage(files, "q1"), SinkMessage([], None), None, SinkMessage(files, "q1")]) == "q1"
    with pytest.raises(InvalidConfig, match="query ids"):
        sink_query_id([SinkMessage(files, "q1"), SinkMessage(files, "q2")])
