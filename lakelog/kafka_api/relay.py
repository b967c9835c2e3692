"""Share-group calls passed on to the node that serves the group.

A Kafka share consumer sends ShareFetch and ShareAcknowledge to each partition's leader, as Metadata names
it; a share group's records and sessions live with the group's coordinator (`platform/share/`). A node that
gets such a call for a group it does not coordinate passes the request, as it came, to the coordinator's
Kafka listener, and answers what came back: the client never learns of the hop. Each client connection gets
its own connection to each node it is relayed to (calls on it one at a time, as the client's own are
answered in order), closed with the client's.

Not with SASL: the coordinator would ask the relaying node to authenticate as the client, which it cannot;
there the call is answered NOT_COORDINATOR, as before.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

from lakelog.kafka_api.protocol import Call


@dataclass(frozen=True)
class Relayed:
    """The other node's answer, as it came: framed, with the client's correlation id (the listener sends it
    on unchanged)."""

    frame: bytes


class Upstream:
    """One connection to another node's Kafka listener, for one client connection's relayed calls."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def call(self, call: Call) -> Relayed:
        """The other node's answer to `call`."""
        async with self._lock:
            try:
                return await self._exchange(call)
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()  # the other node restarted or dropped the connection: one fresh attempt
                return await self._exchange(call)

    async def _exchange(self, call: Call) -> Relayed:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(*self.address)
        assert self._reader is not None
        request = call.body
        request.API_VERSION = call.version
        request.with_header(correlation_id=call.correlation_id, client_id=call.client_id)
        frame = bytes(request.encode(header=True))
        self._writer.write(struct.pack(">i", len(frame)) + frame)
        await self._writer.drain()
        size = await self._reader.readexactly(4)
        return Relayed(size + await self._reader.readexactly(struct.unpack(">i", size)[0]))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


class Relays:
    """A client connection's upstream connections, by node."""

    def __init__(self) -> None:
        self._upstreams: dict[tuple[str, int], Upstream] = {}

    async def call(self, address: tuple[str, int], call: Call) -> Relayed:
        """`call` answered by the node whose Kafka listener is at `address` (host, port)."""
        upstream = self._upstreams.get(address)
        if upstream is None:
            upstream = self._upstreams[address] = Upstream(address)
        return await upstream.call(call)

    def close(self) -> None:
        for upstream in self._upstreams.values():
            upstream.close()
        self._upstreams.clear()
