"""The latency model itself (tests/s3_latency.py): the request parser and classifier, the counts through
the proxy for known boto3 calls, and the delay (a lower bound, the proxy's own correctness property)."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from typing import Iterator

import pytest

from s3_latency import KINDS, DelayProxy, HttpRequestStream, classify

KEEP_ALIVE_STREAM = (
    b"PUT /bkt/t/part-0.parquet HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world"
    b"PUT /bkt/t/_delta_log/00000000000000000001.json HTTP/1.1\r\nHost: x\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\nGET /\r\n0\r\nx-trailer: 1\r\n\r\n"
    b"GET /bkt?list-type=2&prefix=t%2F HTTP/1.1\r\nHost: x\r\n\r\n"
    b"HEAD /bkt/t/part-0.parquet HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    b"GET /bkt/t/part-0.parquet HTTP/1.1\r\nHost: x\r\n\r\n"
)
KEEP_ALIVE_HEADS = [("PUT", "/bkt/t/part-0.parquet"), ("PUT", "/bkt/t/_delta_log/00000000000000000001.json"),
                    ("GET", "/bkt?list-type=2&prefix=t%2F"), ("HEAD", "/bkt/t/part-0.parquet"),
                    ("GET", "/bkt/t/part-0.parquet")]


@pytest.mark.parametrize("piece", [1, 2, 7, 64, len(KEEP_ALIVE_STREAM)])
def test_parser_finds_every_request_of_a_keep_alive_stream_however_it_is_split(piece: int) -> None:
    # The chunked body spells a request line: only correct framing keeps it from being counted.
    seen: list[tuple[str, str]] = []
    stream = HttpRequestStream(lambda method, target: seen.append((method, target)))
    for start in range(0, len(KEEP_ALIVE_STREAM), piece):
        stream.feed(KEEP_ALIVE_STREAM[start:start + piece])
    assert seen == KEEP_ALIVE_HEADS


@pytest.mark.parametrize(("method", "target", "kind"), [
    ("PUT", "/bkt/root/topics/t/partition%3D3/part-1.parquet", "put_data"),
    ("PUT", "/bkt/root/topics/t/_delta_log/00000000000000000007.json", "put_log"),
    ("PUT", "/bkt/root/t/part-1.parquet?partNumber=2&uploadId=abc", "put_data"),
    ("POST", "/bkt/root/t/part-1.parquet?uploads", "put_data"),
    ("GET", "/bkt?list-type=2&prefix=root%2F", "list"),
    ("GET", "/bkt/root/_delta_log/00000000000000000007.json", "get"),
    ("HEAD", "/bkt/root/t/part-1.parquet", "head"),
    ("DELETE", "/bkt/root/t/part-1.parquet", "delete"),
    ("POST", "/bkt?delete", "delete"),
    ("PUT", "/bkt", "other"),
])
def test_classify(method: str, target: str, kind: str) -> None:
    assert classify(method, target) == kind


@pytest.mark.s3
def test_counts_by_kind_for_known_boto3_calls(s3_proxy) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=s3_proxy.endpoint, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    prefix = s3_proxy.root().removeprefix(f"s3://{s3_proxy.bucket}/")
    with s3_proxy.counter.measure() as counted:
        client.put_object(Bucket=s3_proxy.bucket, Key=f"{prefix}/part-0.parquet", Body=b"d" * 200_000)
        client.put_object(Bucket=s3_proxy.bucket, Key=f"{prefix}/_delta_log/00000000000000000000.json", Body=b"{}")
        assert client.get_object(Bucket=s3_proxy.bucket, Key=f"{prefix}/part-0.parquet")["Body"].read() == b"d" * 200_000
        client.head_object(Bucket=s3_proxy.bucket, Key=f"{prefix}/part-0.parquet")
        listed = client.list_objects_v2(Bucket=s3_proxy.bucket, Prefix=f"{prefix}/")
    assert listed["KeyCount"] == 2
    expected = {kind: 0 for kind in KINDS} | {"put_data": 1, "put_log": 1, "get": 1, "head": 1, "list": 1}
    assert counted.counts == expected, counted.describe()
    assert s3_proxy.counter.snapshot()["put_log"] >= 1
    s3_proxy.counter.reset()
    assert s3_proxy.counter.snapshot() == {kind: 0 for kind in KINDS}


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A TCP echo server: the proxy's delay measured with nothing else on the path."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _round_trip(sock: socket.socket, payload: bytes) -> float:
    start = time.perf_counter()
    sock.sendall(payload)
    received = b""
    while len(received) < len(payload):
        received += sock.recv(65536)
    assert received == payload
    return time.perf_counter() - start


def test_each_direction_is_delayed_and_the_delay_can_change(echo_port: int) -> None:
    with DelayProxy(echo_port, 0.0) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _round_trip(sock, b"warm")
        for delay in (0.05, 0.02):
            proxy.delay = delay
            assert min(_round_trip(sock, b"ping") for _ in range(3)) >= 2 * delay


def test_pipelined_chunks_are_not_delayed_one_after_another(echo_port: int) -> None:
    delay, chunks = 0.25, 8
    with DelayProxy(echo_port, delay) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        for i in range(chunks):
            sock.sendall(bytes([i]) * 10)
            time.sleep(0.01)  # separate segments: the proxy sees separate chunks
        received = b""
        while len(received) < 10 * chunks:
            received += sock.recv(65536)
        elapsed = time.perf_counter() - start
    assert received == b"".join(bytes([i]) * 10 for i in range(chunks))  # in order
    assert elapsed >= 2 * delay
    # Serialised delays would take chunks * delay (2 s) one way alone; netem-like takes ~2 * delay + 0.08.
    assert elapsed < chunks * delay * 0.75
