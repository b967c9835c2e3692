"""One Kafka request at a chosen version over a socket, and its decoded answer: what a client that speaks
only that version (KafkaJS, sarama, an old librdkafka) sends, without depending on any client's choice."""

from __future__ import annotations

import socket
import struct
from typing import Any

from lakelog.kafka_api.protocol import RESPONSES


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        data += chunk
    return data


def call(bootstrap: str, request: Any, version: int, timeout_s: float = 30) -> Any:
    """Send `request` as `version` to the listener at `bootstrap` (host:port); answers the decoded response."""
    host, port = bootstrap.rsplit(":", 1)
    request.API_VERSION = version
    request.with_header(correlation_id=11, client_id="raw-test")
    frame = bytes(request.encode(header=True))
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _exactly(sock, 4))[0]
        answer = struct.pack(">i", size) + _exactly(sock, size)
    response = RESPONSES[request.API_KEY].decode(answer, version=version, header=True, framed=True)
    assert response.header.correlation_id == 11
    return response
