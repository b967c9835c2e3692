"""HTTP fetch beside Kafka transactions: records are answered up to the last stable offset (read committed,
the default), with `last_stable_offset` in the answer; `isolation.level` takes Kafka's two values (which
read the same records) and refuses others with 422."""

from __future__ import annotations

from confluent_kafka import Producer

from tests.http.conftest import create_topic, start_server  # noqa: F401  (the fixture)
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S


def test_http_fetch_reads_committed_records_up_to_the_last_stable_offset(start_server) -> None:  # noqa: F811
    server = start_server()
    with server.client() as client:
        create_topic(client, "mixed")
        plain = Producer({"bootstrap.servers": server.bootstrap})
        plain.produce("mixed", value=b"before", partition=0)
        assert plain.flush(STUCK_S) == 0
        producer = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "http-view"})
        producer.init_transactions(STUCK_S)
        producer.begin_transaction()
        producer.produce("mixed", value=b"pending", partition=0)
        producer.flush(STUCK_S)
        plain.produce("mixed", value=b"after", partition=0)  # committed, but behind the open transaction
        assert plain.flush(STUCK_S) == 0

        def fetch(**params: object) -> dict:
            response = client.get("/v1/topics/mixed/partitions/0/records", params={"offset": 0, **params})
            assert response.status_code == 200, response.text
            return response.json()

        for level in ({}, {"isolation.level": "read_committed"}, {"isolation.level": "read_uncommitted"}):
            answer = fetch(**level)
            assert [r["value"] for r in answer["records"]] == ["before"]
            assert (answer["last_stable_offset"], answer["high_watermark"]) == (1, 3)
        assert client.get("/v1/topics/mixed/partitions/0/records",
                          params={"offset": 0, "isolation.level": "dirty"}).status_code == 422
        producer.commit_transaction(STUCK_S)
        values, offset = [], 0
        while True:  # a consumer's fetches: an answer may stop early (the tail cache's run)
            answer = fetch(offset=offset)
            if not answer["records"]:
                break
            values += [r["value"] for r in answer["records"]]
            offset = answer["next_offset"]
        assert values == ["before", "pending", "after"] and answer["last_stable_offset"] == 4  # 3: the marker
        assert offset == 3 and answer["next_offset"] == 4  # an answer without records moves past the marker
    assert_topic_intact(server.root, "mixed")
