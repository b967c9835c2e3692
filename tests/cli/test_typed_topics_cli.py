"""`lakelog produce` to a typed topic checks its records as HTTP and Kafka do: stdin lines are not in
Confluent's wire format, so they are refused (nothing written), or dead-lettered when the topic names a
dead-letter topic; `topics alter` sets the configs."""

from __future__ import annotations

import json

from lakelog.platform import Broker
from tests.cli.test_groups_cli import lines, run
from tests.log_check import assert_topic_intact


def test_cli_produce_to_a_typed_topic(tmp_path) -> None:
    root = str(tmp_path / "root")
    run(root, "topics", "create", "typed", "--config", "confluent.value.schema.validation=true")
    run(root, "topics", "create", "typed-dlq")
    refused = run(root, "produce", "typed", stdin="hello\n", ok=False)
    assert refused.returncode == 1 and "INVALID_RECORD" in refused.stderr and "nothing was written" in refused.stderr
    with Broker(root=root) as broker:
        assert broker.describe_topic("typed").partitions[0].log_end_offset == 0

    altered = run(root, "topics", "alter", "typed", "--config", "errors.deadletterqueue.topic.name=typed-dlq")
    assert json.loads(altered.stdout)["config"]["errors.deadletterqueue.topic.name"] == "typed-dlq"
    assert lines(run(root, "produce", "typed", stdin="hello\n")) == [{"partition": -1, "offset": -1}]
    (dead,) = lines(run(root, "consume", "typed-dlq", "--from", "earliest", "--max", "1"))
    assert dead["value"] == "hello" and dead["headers"][1] == {"key": "__lakelog.dlq.topic", "value": "typed"}
    assert "magic byte 104" in dead["headers"][0]["value"]
    assert_topic_intact(root, "typed-dlq")
