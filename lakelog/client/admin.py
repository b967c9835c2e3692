"""AdminClient: topics, configs, partitions, groups and offsets, one synchronous call each.

confluent-kafka's AdminClient answers dicts of futures because Kafka's admin calls fan out to many
brokers; here each is one HTTP request, so methods answer the server's JSON (plain dicts) directly.
"""

from __future__ import annotations

import time
from typing import Any, Mapping
from urllib.parse import quote

from lakelog.client.http import Session, with_retries
from lakelog.client.message import TopicPartition


def _q(name: str) -> str:
    return quote(name, safe="")


class AdminClient:
    """`AdminClient(url)`; every call retries retriable failures for up to `timeout` seconds."""

    def __init__(self, url: str, config: Mapping[str, Any] | None = None, *, api_key: str | None = None,
                 timeout: float = 60.0) -> None:
        config = dict(config or {})
        self._timeout_s = float(config.pop("default.api.timeout.ms", timeout * 1000)) / 1000
        self._session = Session(url, api_key or config.pop("api.key", None),
                                float(config.pop("request.timeout.ms", 30_000)) / 1000)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return with_retries(lambda: self._session.request(method, path, **kwargs),
                            time.monotonic() + self._timeout_s)

    # ---- topics -------------------------------------------------------------------------------

    def create_topic(self, name: str, num_partitions: int = 1, config: Mapping[str, Any] | None = None) -> dict:
        """Create a topic (the server never auto-creates); answers its description."""
        return self._call("POST", "/v1/topics", json={"name": name, "partitions": num_partitions,
                                                      "config": dict(config or {})})

    def list_topics(self) -> dict[str, int]:
        """Topic name -> partition count (the topics the caller may describe)."""
        return {t["name"]: t["partitions"] for t in self._call("GET", "/v1/topics")["topics"]}

    def describe_topic(self, name: str) -> dict:
        """Config and per-partition log start/end offsets and sizes."""
        return self._call("GET", f"/v1/topics/{_q(name)}")

    def delete_topic(self, name: str) -> None:
        self._call("DELETE", f"/v1/topics/{_q(name)}")

    def describe_configs(self, topic: str) -> dict[str, Any]:
        return self.describe_topic(topic)["config"]

    def alter_configs(self, topic: str, config: Mapping[str, Any]) -> dict[str, Any]:
        """Change the given keys (Kafka names), keep the others; answers the whole new config."""
        return self._call("PATCH", f"/v1/topics/{_q(topic)}/config", json={"config": dict(config)})["config"]

    def create_partitions(self, topic: str, new_total_count: int) -> dict:
        """Raise the partition count to `new_total_count` (never lowers it)."""
        return self._call("POST", f"/v1/topics/{_q(topic)}/partitions", json={"partitions": new_total_count})

    # ---- groups -------------------------------------------------------------------------------

    def list_groups(self) -> dict[str, str]:
        """Group id -> state (Empty, PreparingRebalance, Stable)."""
        return {g["group"]: g["state"] for g in self._call("GET", "/v1/groups")["groups"]}

    def describe_group(self, group: str) -> dict:
        """Members with their assignments, the generation, committed offsets and lag."""
        return self._call("GET", f"/v1/groups/{_q(group)}")

    def delete_group(self, group: str) -> None:
        """Delete an empty group and its committed offsets; NON_EMPTY_GROUP while it has members."""
        self._call("DELETE", f"/v1/groups/{_q(group)}")

    # ---- offsets -------------------------------------------------------------------------------

    def list_offsets(self, topic: str, partition: int, spec: str | int = "latest") -> int:
        """The earliest or latest offset, or the first offset at or after a timestamp (ms)."""
        answer = self._call("GET", f"/v1/topics/{_q(topic)}/partitions/{partition}/offsets",
                            params={"spec": str(spec)})
        return int(answer["offset"])

    def list_consumer_group_offsets(self, group: str) -> list[TopicPartition]:
        """Committed offsets (the next offset to read), with their metadata."""
        answer = self._call("GET", f"/v1/groups/{_q(group)}/offsets")
        return [TopicPartition(o["topic"], o["partition"], o["offset"], o.get("metadata"))
                for o in answer["offsets"]]

    def consumer_group_lag(self, group: str) -> dict[tuple[str, int], int | None]:
        answer = self._call("GET", f"/v1/groups/{_q(group)}/offsets")
        return {(o["topic"], o["partition"]): o.get("lag") for o in answer["offsets"]}

    def reset_consumer_group_offsets(self, group: str, to: str = "earliest", topics: list[str] | None = None,
                                     timestamp: int | None = None,
                                     offsets: list[TopicPartition] | None = None) -> list[TopicPartition]:
        """Reset an empty group's offsets: to earliest, latest, a timestamp (ms), or explicit offsets."""
        body: dict[str, Any] = {"to": "explicit" if offsets else ("timestamp" if timestamp is not None else to)}
        if topics:
            body["topics"] = topics
        if timestamp is not None:
            body["timestamp"] = timestamp
        if offsets:
            body["offsets"] = [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset} for tp in offsets]
        answer = self._call("POST", f"/v1/groups/{_q(group)}/offsets/reset", json=body)
        return [TopicPartition(o["topic"], o["partition"], o["offset"]) for o in answer["offsets"]]

    def alter_consumer_group_offsets(self, group: str, offsets: list[TopicPartition]) -> list[TopicPartition]:
        """Commit offsets for a group without members (as Kafka, it refuses while members are active)."""
        body = {"generation": -1, "offsets": [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset}
                                              for tp in offsets]}
        answer = self._call("POST", f"/v1/groups/{_q(group)}/offsets", json=body)
        return [TopicPartition(o["topic"], o["partition"], o["offset"]) for o in answer["offsets"]]

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
