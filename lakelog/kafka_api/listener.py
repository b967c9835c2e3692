"""The Kafka listener: an asyncio server in the same process (and event loop) as HTTP.

Each connection reads frames and answers them in order, as Kafka requires, while the calls themselves
run concurrently (a producer's pipelined requests reach the broker in the order they were sent: each
handler submits before its first await). The group coordinator's calls of one connection are the
exception: each starts once the one before has its answer, as every call does in Kafka, which
handles one request per connection at a time. Clients rely on it: a consumer's OffsetCommit followed by
its JoinGroup must be durable before that JoinGroup can end the rebalance and hand the partition to a
member that reads the committed offset. With authentication on, a connection must pass SASL/PLAIN
(`sasl.py`) before anything but ApiVersions and the SASL calls; after a SaslHandshake v0 the token comes
as a raw frame without a Kafka header (as before KIP-152).

Every refusal (a version or API not served, a frame that cannot be read, a call before authentication,
an answer carrying a protocol error) is logged at WARNING through `refusals.py`, once a minute per
client, API, version and cause.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from kafka.protocol.api_key import ApiKey

from lakelog.kafka_api import errors, protocol, refusals, sasl
from lakelog.kafka_api.context import Context, Services
from lakelog.kafka_api.fetch_sessions import FetchSessions
from lakelog.kafka_api.handlers import HANDLERS
from lakelog.kafka_api.nodes import parse_address
from lakelog.kafka_api.protocol import Call, Unanswerable
from lakelog.kafka_api.relay import Relayed
from lakelog.kafka_api.share_sessions import ShareSessions

BEFORE_AUTHENTICATION = frozenset({ApiKey.ApiVersions, ApiKey.SaslHandshake, ApiKey.SaslAuthenticate})
CLOSE = object()  # the answer that ends a connection (None: a call without an answer, as acks=0)
IN_FLIGHT = 64  # requests read ahead of their answers, per connection (Kafka clients send up to 5)
EMPTY_FRAME = struct.pack(">i", 0)  # the answer to a raw SASL/PLAIN token: no challenge
ONE_AT_A_TIME = frozenset({ApiKey.JoinGroup, ApiKey.SyncGroup, ApiKey.Heartbeat, ApiKey.LeaveGroup,
                           ApiKey.OffsetCommit, ApiKey.OffsetFetch})  # the group coordinator's calls


class KafkaListener:
    def __init__(self, host: str, port: int, services_of: Callable[[], Services | None],
                 tls: ssl.SSLContext | None = None) -> None:
        self.host, self.port = host, port
        self.advertised = (host, port)  # what Metadata tells clients: `advertise` once bound
        self._services_of = services_of
        self._tls = tls
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()
        self.share_sessions = ShareSessions()  # the listener's connections share them: a member may reconnect
        self.fetch_sessions = FetchSessions()  # and these (KIP-227): a consumer may reconnect

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=self._tls,
                                                  reuse_address=True, limit=protocol.MAX_FRAME_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]  # port 0: the one the system chose

    def advertise(self, address: str) -> None:
        """host:port clients are told to reach this node at (Metadata, FindCoordinator)."""
        self.advertised = parse_address(address)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # asyncio runs each connection's callback in a task of its own
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        context = Context(self._services_of, self.advertised, peer=str(peer[0]) if peer else "",
                          share_sessions=self.share_sessions, fetch_sessions=self.fetch_sessions)
        try:
            await Connection(context, reader, writer).run()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or the listener is stopping
        finally:
            self._connections.discard(task)
            writer.close()


class Connection:
    def __init__(self, context: Context, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.context = context
        self.reader, self.writer = reader, writer
        self.answers: asyncio.Queue[Awaitable[Any]] = asyncio.Queue(IN_FLIGHT)
        self.group_call: asyncio.Future[Any] | None = None  # the latest of ONE_AT_A_TIME
        self.closing = False
        self.raw_sasl = False  # the next frame is a raw SASL token (after a SaslHandshake v0)

    async def run(self) -> None:
        sender = asyncio.create_task(self._send())
        try:
            while True:
                size = struct.unpack(">i", await self.reader.readexactly(4))[0]
                if not 0 < size <= protocol.MAX_FRAME_BYTES:
                    self._refused(None, None, self.context.client_id, "bad frame size",
                                  f"{size} bytes (at most {protocol.MAX_FRAME_BYTES})")
                    return
                frame = await self.reader.readexactly(size)
                if self.raw_sasl:
                    await self.answers.put(self._sasl_token(frame))
                else:
                    answer = self._dispatch(frame)
                    await self.answers.put(answer)
                    if not self.closing and _is_sasl(frame):  # the identity changes: later calls wait for it
                        await asyncio.shield(answer)
                        self.raw_sasl = _is_handshake_v0(frame) and self.context.sasl_mechanism is not None
                if self.closing:  # nothing after it is read
                    return
        finally:
            if not self.closing:
                await self.answers.put(_ready(CLOSE))
            await sender
            self.context.relays.close()

    def _dispatch(self, frame: bytes) -> Awaitable[Any]:
        try:
            call = protocol.decode(frame)
        except Unanswerable as refused:
            closed = refused.answer is None  # else an ApiVersions the client retries in the version answered
            self._refused(refused.api_key, refused.version, refused.client_id, refused.cause,
                          protocol.served_range(refused.api_key), closed, logging.WARNING if closed else logging.INFO)
            return self._close() if closed else _ready(refused.answer)
        except Exception as exc:  # a frame the codec cannot read: nothing the client could match it to
            api_key, version = struct.unpack_from(">hh", frame) if len(frame) >= 4 else (None, None)
            self._refused(api_key, version, protocol.header_client_id(frame), "undecodable request", str(exc))
            return self._close()
        self.context.client_id = call.client_id
        if self.context.services_of() is not None and self._needs_authentication(call):
            self._refused(call.api_key, call.version, call.client_id, "not authenticated",
                          "SASL authentication must come first")
            return self._close()
        if call.api_key in ONE_AT_A_TIME:
            self.group_call = asyncio.ensure_future(self._answer_after(self.group_call, call))
            return self.group_call
        return asyncio.ensure_future(self._answer(call))

    def _sasl_token(self, token: bytes) -> Awaitable[Any]:
        """The raw SASL/PLAIN token after a SaslHandshake v0: an empty frame when it authenticates; else
        the connection is closed, as Kafka closes it (v0 has no way to say why)."""
        self.raw_sasl = False
        try:
            sasl.authenticate_raw(self.context, token)
        except Exception as exc:
            self._refused(ApiKey.SaslHandshake, 0, self.context.client_id, "SASL_AUTHENTICATION_FAILED", str(exc))
            return self._close()
        return _ready(EMPTY_FRAME)

    def _close(self) -> Awaitable[Any]:
        """The answer that closes the connection once the answers before it are sent."""
        self.closing = True
        return _ready(CLOSE)

    def _refused(self, api_key: int | None, version: int | None, client_id: str | None, cause: str,
                 detail: str = "", closed: bool = True, level: int = logging.WARNING) -> None:
        refusals.REFUSALS.refuse(self.context.peer, client_id, api_key, version, cause, detail, closed, level)

    def _needs_authentication(self, call: Call) -> bool:
        services = self.context.services_of()
        enabled = services is not None and services.authorizer.enabled
        return enabled and not self.context.authenticated and call.api_key not in BEFORE_AUTHENTICATION

    async def _answer(self, call: Call) -> Any:
        try:
            response = await HANDLERS[call.api_key](self.context, call)
        except Exception as exc:  # a handler answers per-item errors itself: this is the whole call failing
            code = errors.error_code(exc)
            answer = protocol.error_answer(call.api_key, call.version, call.correlation_id, code)
            if answer is None or code in refusals.REFUSAL_CODES:
                self._refused(call.api_key, call.version, call.client_id, refusals.NAMES.get(code, str(code)),
                              errors.error_message(exc), closed=answer is None)
            if answer is None:  # no error field to carry it: an answer would read as an empty success
                self.closing = True
                return CLOSE
            return answer
        if response is None:
            return None
        if isinstance(response, Relayed):  # another node's answer, framed for this client already
            return response.frame
        for code, message in refusals.item_refusals(response).items():
            self._refused(call.api_key, call.version, call.client_id, refusals.NAMES.get(code, str(code)),
                          message or "", closed=False)
        return call.answer(response)

    async def _answer_after(self, previous: asyncio.Future[Any] | None, call: Call) -> bytes | None:
        if previous is not None:
            await asyncio.wait([previous])  # its outcome is its own answer's business
        return await self._answer(call)

    async def _send(self) -> None:
        while True:
            answer = await (await self.answers.get())
            if answer is CLOSE:
                self.closing = True
                self.writer.close()  # the reader sees the end and stops
                while not self.answers.empty():  # a reader waiting for room (a call closed late) stops too
                    self.answers.get_nowait()
                break
            if answer is not None:
                self.writer.write(answer)
            await self.writer.drain()


def _is_sasl(frame: bytes) -> bool:
    return struct.unpack_from(">h", frame)[0] in (ApiKey.SaslHandshake, ApiKey.SaslAuthenticate)


def _is_handshake_v0(frame: bytes) -> bool:
    return struct.unpack_from(">hh", frame) == (ApiKey.SaslHandshake, 0)


def _ready(answer: Any) -> Awaitable[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_result(answer)
    return future


def tls_context(cert_file: str | None, key_file: str | None) -> ssl.SSLContext | None:
    """TLS when a certificate is configured."""
    if not cert_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context
