"""The one HTTP session of the client: base URL, API key, timeouts, and errors mapped to KafkaException.

Each thread that talks to the server (the application's, a producer's sender, a consumer's heartbeat)
gets its own Session, so a long poll never holds up a heartbeat.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, TypeVar

import httpx

from lakelog.client.errors import TIMED_OUT, TRANSPORT, KafkaError, KafkaException

T = TypeVar("T")
JSON_TYPE = "application/json"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
# Statuses that mean "try again" even when the body is not the server's error JSON (e.g. a proxy's).
RETRIABLE_STATUSES = frozenset({429, 502, 503, 504})


class Session:
    """httpx.Client bound to the servers of `url` (one URL, or several separated by commas: the nodes of a
    cluster, as Kafka's bootstrap.servers); `request` answers the parsed JSON or raises KafkaException.

    Any node serves any request. A node that does not answer, or answers 503, makes the session move on to
    the next one, so the caller's retry goes elsewhere."""

    def __init__(self, url: str, api_key: str | None = None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        urls = [u.strip().rstrip("/") for u in url.split(",") if u.strip()]
        if not urls:
            raise ValueError(f"no server URL in {url!r}")
        self._clients = [httpx.Client(base_url=u, headers=headers,
                                      timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)))
                         for u in urls]
        self._current = 0

    @property
    def _client(self) -> httpx.Client:
        return self._clients[self._current]

    def _next_node(self) -> None:
        self._current = (self._current + 1) % len(self._clients)

    def request(self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None,
                content: bytes | None = None, headers: Mapping[str, str] | None = None,
                timeout_s: float | None = None) -> Any:
        """Send one request; 2xx answers their JSON (None for 204), anything else raises KafkaException."""
        extra: dict[str, Any] = {}
        if timeout_s is not None:
            extra["timeout"] = httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0))
        try:
            response = self._client.request(method, path, json=json, params=params, content=content,
                                            headers=headers, **extra)
        except httpx.TimeoutException as exc:
            self._next_node()
            raise KafkaException(KafkaError(TIMED_OUT, f"{method} {path}: no answer in time ({exc})", True)) from None
        except httpx.TransportError as exc:
            self._next_node()
            raise KafkaException(KafkaError(TRANSPORT, f"{method} {path}: {type(exc).__name__}: {exc}", True)) \
                from None
        if response.status_code >= 400:
            if response.status_code == 503:
                self._next_node()
            raise KafkaException(error_of(response))
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def close(self) -> None:
        for client in self._clients:
            client.close()


def error_of(response: httpx.Response) -> KafkaError:
    """The server's `{"error_code", "message", "retriable"}`, or a stand-in for a body that is not one."""
    try:
        body = response.json()
    except ValueError:
        body = None
    status = response.status_code
    if isinstance(body, dict) and "error_code" in body:
        error = KafkaError(str(body["error_code"]), str(body.get("message", "")),
                           bool(body.get("retriable")) or status in RETRIABLE_STATUSES, status)
    else:
        error = KafkaError(f"HTTP_{status}", response.text[:500], status in RETRIABLE_STATUSES, status)
    retry_after = response.headers.get("retry-after")
    if retry_after is not None:
        try:
            error.retry_after_s = float(retry_after)
        except ValueError:
            pass
    return error


def with_retries(call: Callable[[], T], deadline: float, backoff_s: float = 0.1, max_backoff_s: float = 1.0,
                 stop: Callable[[], bool] = lambda: False) -> T:
    """Call until it succeeds, a non-retriable error, or the deadline (monotonic seconds) passes.

    Why: a restarting server answers nothing, then 503 for a moment; callers want the request to land."""
    delay = backoff_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0]
            if not error.retriable() or stop():
                raise
            wait = min(max(delay, error.retry_after_s if error.status() == 429 else 0.0), max_backoff_s)
            if time.monotonic() + wait > deadline:
                raise
            time.sleep(wait)
            delay = min(delay * 2, max_backoff_s)
