"""A partition another Delta tool changed outside lakelog, as clients see it: once the node's table commit met
the change, HTTP answers 409 DATA_CHANGED_OUTSIDE_LAKELOG on produce and fetch, the Kafka listener
KAFKA_STORAGE_ERROR (56) on fetch, as Kafka does for a log it took offline; the topic's other partitions are
served."""

from __future__ import annotations

import socket
import struct

from kafka.protocol.consumer import FetchRequest, FetchResponse

from lakelog.kafka_api.errors import CODES
from tests.http.conftest import create_topic, fetch_all, start_server  # noqa: F401  (the fixture)
from tests.outside_writer import run_delta_rs

FETCH_VERSION = 4


def kafka_fetch_error(bootstrap: str, topic: str, partition: int) -> int:
    """One Fetch request on a socket, as a Kafka consumer sends it: the partition's error code."""
    request = FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                               FetchRequest.FetchTopic.FetchPartition(partition=partition, fetch_offset=0,
                                                                      partition_max_bytes=1 << 20)])])
    request.API_VERSION = FETCH_VERSION
    request.with_header(correlation_id=1, client_id="outside-change-test")
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", _read(sock, 4))[0]
        answer = FetchResponse.decode(struct.pack(">i", size) + _read(sock, size), version=FETCH_VERSION,
                                      header=True, framed=True)
    [topic_data] = answer.responses
    [partition_data] = topic_data.partitions
    return partition_data.error_code


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the listener closed the connection"
        data += chunk
    return data


def test_a_partition_changed_outside_is_refused_over_http_and_kafka(start_server) -> None:  # noqa: F811
    server = start_server()
    with server.client() as client:
        create_topic(client, "orders", partitions=2)
        for partition in (0, 1):
            body = {"records": [{"value": f"v{i}", "partition": partition} for i in range(5)]}
            assert client.post("/v1/topics/orders/records", json=body).status_code == 200
        assert kafka_fetch_error(server.bootstrap, "orders", 0) == 0
        server.settle()  # the table committed behind the acknowledgement: the outside writer appends past its end
        run_delta_rs(f"{server.root}/topics/orders", None, """
end = dt.transaction_version("lakelog.partition.0")
assert end == 5, end
write_deltalake(dt, rows(0, range(end, end + 3)), mode="append")""")

        # The change is found at the node's next table commit of the partition, not at the produce: one made
        # before it may be acknowledged (at the log end lakelog knows; it waits in the journal for a repair).
        waiting = client.post("/v1/topics/orders/records", json={"records": [{"value": "x", "partition": 0}]})
        assert waiting.status_code in (200, 409), waiting.text
        if waiting.status_code == 200:
            assert waiting.json()["offsets"][0]["offset"] == 5
        else:
            assert waiting.json()["error_code"] == "DATA_CHANGED_OUTSIDE_LAKELOG"
        server.settle()  # the node's table commit meets the change: the partition is refused from then on

        produced = client.post("/v1/topics/orders/records", json={"records": [{"value": "y", "partition": 0}]})
        assert produced.status_code == 409, produced.text
        answer = produced.json()
        assert answer["error_code"] == "DATA_CHANGED_OUTSIDE_LAKELOG" and answer["retriable"] is False
        assert "partition 0 of topic 'orders' was changed outside lakelog" in answer["message"]
        fetched = client.get("/v1/topics/orders/partitions/0/records", params={"offset": 0})
        assert fetched.status_code == 409 and fetched.json()["error_code"] == "DATA_CHANGED_OUTSIDE_LAKELOG"
        assert kafka_fetch_error(server.bootstrap, "orders", 0) == CODES["KAFKA_STORAGE_ERROR"]

        assert kafka_fetch_error(server.bootstrap, "orders", 1) == 0
        assert [r["value"] for r in fetch_all(client, "orders", 1)] == [f"v{i}" for i in range(5)]
