"""The listener runs one connection's calls concurrently, but the group coordinator's calls one after the
other, as Kafka runs every call of a connection: a consumer's OffsetCommit must be answered (durable)
before its pipelined JoinGroup can end a rebalance and hand the partition to a member that reads the
committed offset."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kafka.protocol.api_key import ApiKey

from lakelog.kafka_api import listener, protocol
from lakelog.kafka_api.context import Context


def frame(api_key: ApiKey, version: int, correlation_id: int) -> bytes:
    request = protocol.REQUESTS[api_key]()
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="test")
    return bytes(request.encode(header=True, framed=True))


class Writer:
    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_group_calls_wait_for_the_one_before_other_calls_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []

    async def run() -> None:
        release = asyncio.Event()

        def handler(name: str, wait: bool = False) -> Any:
            async def handle(context: Context, call: protocol.Call) -> None:
                events.append(f"{name} started")
                if wait:
                    await release.wait()  # the commit is not durable yet
                events.append(f"{name} answered")
                return None  # no answer frame: the order of the calls is what counts
            return handle

        monkeypatch.setitem(listener.HANDLERS, ApiKey.OffsetCommit, handler("commit", wait=True))
        monkeypatch.setitem(listener.HANDLERS, ApiKey.JoinGroup, handler("join"))
        monkeypatch.setitem(listener.HANDLERS, ApiKey.Heartbeat, handler("heartbeat"))
        monkeypatch.setitem(listener.HANDLERS, ApiKey.Fetch, handler("fetch"))
        reader = asyncio.StreamReader()
        reader.feed_data(frame(ApiKey.OffsetCommit, 2, 1) + frame(ApiKey.JoinGroup, 5, 2)
                         + frame(ApiKey.Fetch, 4, 3) + frame(ApiKey.Heartbeat, 3, 4))
        context = Context(lambda: None, ("127.0.0.1", 9092))
        connection = listener.Connection(context, reader, Writer())  # type: ignore[arg-type]
        serving = asyncio.create_task(connection.run())
        for _ in range(20):
            await asyncio.sleep(0)
        assert events == ["commit started", "fetch started", "fetch answered"]  # the join waits, the fetch not
        release.set()
        reader.feed_eof()
        with pytest.raises(asyncio.IncompleteReadError):  # the client went away (the listener ignores it)
            await asyncio.wait_for(serving, 5)

    asyncio.run(run())
    assert events == ["commit started", "fetch started", "fetch answered", "commit answered",
                      "join started", "join answered", "heartbeat started", "heartbeat answered"]


class ClosingWriter(Writer):
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_call_before_sasl_authentication_closes_the_connection() -> None:
    class Services:
        class authorizer:  # noqa: N801  (API keys configured)
            enabled = True
        closing = False

    async def run() -> ClosingWriter:
        reader = asyncio.StreamReader()
        reader.feed_data(frame(ApiKey.Metadata, 4, 1) + frame(ApiKey.Metadata, 4, 2) * 100)  # more than in flight
        writer = ClosingWriter()
        connection = listener.Connection(Context(lambda: Services(), ("127.0.0.1", 9092)), reader,
                                         writer)  # type: ignore[arg-type]
        await asyncio.wait_for(connection.run(), 5)  # stops reading at the refused call
        return writer

    assert asyncio.run(run()).closed
