"""A tap on the wire between a Kafka client and lakelog's Kafka listener: a TCP forwarder that notes the
codec and record count of every record batch the client produces (tests/kafka/test_independent_*.py)."""

from __future__ import annotations

import socket
import struct
import threading

from aiokafka.record.util import calc_crc32c

from tests.conftest import free_port

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


class WireTap:
    """A TCP forwarder in front of the Kafka listener. It forwards bytes as they come and, on the side,
    reads the client's request frames: the v2 record batches of every Produce request (found by their
    CRC-32C, so no request version needs parsing) are remembered with their codec and record count."""

    def __init__(self) -> None:
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.target: tuple[str, int] | None = None
        self.batches: list[tuple[str, int]] = []  # (codec, records) per produced batch
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self.accept, name=f"tap-{self.port}", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def forward_to(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.target = (host, int(port))

    def accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            assert self.target is not None, "the tap got a connection before it knew the server"
            server = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, server]
            threading.Thread(target=self.pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self.pump, args=(server, client, False), daemon=True).start()

    def pump(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        pending = b""
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                if requests:
                    pending += data
                    while len(pending) >= 4 and len(pending) >= 4 + (size := struct.unpack(">i", pending[:4])[0]):
                        self.read_request(pending[4:4 + size])
                        pending = pending[4 + size:]
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def read_request(self, frame: bytes) -> None:
        api_key = struct.unpack(">h", frame[:2])[0]
        if api_key != 0:  # Produce
            return
        found = []
        i = 0
        while i + 61 <= len(frame):
            # baseOffset int64, batchLength int32, leaderEpoch int32, magic int8 (2), crc uint32, attributes ...
            if frame[i + 16] == 2:
                length = struct.unpack(">i", frame[i + 8:i + 12])[0]
                end = i + 12 + length
                if 49 <= length and end <= len(frame):
                    crc = struct.unpack(">I", frame[i + 17:i + 21])[0]
                    if calc_crc32c(frame[i + 21:end]) == crc:
                        attributes = struct.unpack(">h", frame[i + 21:i + 23])[0]
                        count = struct.unpack(">i", frame[i + 57:i + 61])[0]
                        found.append((CODEC_NAMES.get(attributes & 0x07, f"codec {attributes & 0x07}"), count))
                        i = end
                        continue
            i += 1
        with self.lock:
            self.batches += found

    def produced(self) -> list[tuple[str, int]]:
        with self.lock:
            return list(self.batches)

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                s.close()
