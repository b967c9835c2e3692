"""/metrics: log end and start offset per partition, group member counts, process metrics; labels limited to
topic, partition and group."""

from __future__ import annotations

import re

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.http.conftest import create_topic


def samples(text: str) -> dict[str, dict[tuple, float]]:
    found: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_offsets_members_and_process_metrics(client: httpx.Client, topic_name: str) -> None:
    create_topic(client, topic_name, 2)
    produced = client.post(f"/v1/topics/{topic_name}/records",
                           json={"records": [{"value": "a", "partition": 1}, {"value": "b", "partition": 1},
                                             {"value": "c", "partition": 0}]})
    assert produced.status_code == 200, produced.text
    group = f"g-{topic_name}"
    joined = client.post(f"/v1/groups/{group}/members", json={"topics": [topic_name]})
    assert joined.status_code == 201, joined.text

    text = client.get("/metrics").text
    found = samples(text)
    assert found["lakelog_log_end_offset"][(("partition", "0"), ("topic", topic_name))] == 1
    assert found["lakelog_log_end_offset"][(("partition", "1"), ("topic", topic_name))] == 2
    assert found["lakelog_log_start_offset"][(("partition", "0"), ("topic", topic_name))] == 0
    assert found["lakelog_log_start_offset"][(("partition", "1"), ("topic", topic_name))] == 0
    assert found["lakelog_group_members"][(("group", group),)] == 1
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"):
        assert list(found[name].values())[0] > 0, name

    # No label beyond topic, partition and group (and the histogram's `le`, the counters' kind/acks/code).
    labels = set(re.findall(r"[{,]([a-z_]+)=", text))
    assert labels <= {"topic", "partition", "group", "le", "acks", "kind", "code", "implementation", "major",
                      "minor", "patchlevel", "version"}
    client.delete(f"/v1/groups/{group}/members/{joined.json()['member_id']}")
