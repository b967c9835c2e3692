"""Refused Kafka requests, logged: one WARNING line per (client id, API, version, cause) per minute.

A client that lakelog refuses (a version or API it does not serve, a frame it cannot read, a call
before SASL authentication, an answer carrying a protocol error such as UNSUPPORTED_VERSION or
INVALID_REQUEST) usually retries in a loop; the first refusal is what an operator needs to see at the
default log level, the next thousand identical ones would bury everything else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.data_container import DataContainer

from lakelog.kafka_api.errors import CODES
from lakelog.kafka_api.protocol import api_name

log = logging.getLogger("lakelog.kafka_api.listener")
WINDOW_S = 60.0
MAX_REMEMBERED = 10_000  # distinct refusals remembered at once (a bound, not a limit on logging)
NAMES = {code: name for name, code in CODES.items()}

# Error codes that say "lakelog will not do what was asked" (the request or lakelog is at fault), as
# opposed to the state of a topic or group (NOT_COORDINATOR, OFFSET_OUT_OF_RANGE...) or an ACL denial
# (a decision about the principal, answered as such, not a request lakelog cannot serve).
REFUSAL_CODES = frozenset(CODES[name] for name in (
    "UNSUPPORTED_VERSION", "INVALID_REQUEST", "CORRUPT_MESSAGE", "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    "UNSUPPORTED_COMPRESSION_TYPE", "INVALID_RECORD", "UNSUPPORTED_SASL_MECHANISM", "ILLEGAL_SASL_STATE",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
))


class RefusalLog:
    """Rate-limits refusal lines per (client id, API, version, cause)."""

    def __init__(self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.clock = clock
        self._last: dict[tuple[Any, ...], float] = {}

    def refuse(self, peer: str, client_id: str | None, api_key: int | None, version: int | None, cause: str,
               detail: str = "", closed: bool = False, level: int = logging.WARNING) -> bool:
        """Log this refusal unless the same one was logged within the window; True when logged. `level`:
        INFO for ApiVersions' version negotiation (KIP-511), which every newer client goes through."""
        key = (client_id, api_key, version, cause)
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.window_s:
            return False
        if len(self._last) >= MAX_REMEMBERED:
            self._forget(now)
        self._last[key] = now
        api = "a frame" if api_key is None else f"{api_name(api_key)} v{version}"
        fields = {"client_id": client_id, "peer": peer, "api": None if api_key is None else api_name(api_key),
                  "api_version": version, "cause": cause, "closed": closed}  # the JSON log's own keys
        log.log(level, "refused a Kafka request from client %r at %s: %s: %s%s%s (identical refusals are not "
                "logged again for %d s)", client_id, peer or "?", api, cause, f": {detail}" if detail else "",
                "; connection closed" if closed else "", self.window_s, extra={"fields": fields})
        return True

    def _forget(self, now: float) -> None:
        self._last = {k: t for k, t in self._last.items() if now - t < self.window_s}
        if len(self._last) >= MAX_REMEMBERED:  # all recent: start over rather than grow
            self._last.clear()


REFUSALS = RefusalLog()


def item_refusals(response: Any) -> dict[int, str | None]:
    """The refusal codes anywhere in a response (top level or per item), each with the first message
    that came with it."""
    found: dict[int, str | None] = {}
    _walk(response, found)
    return found


# Per response class: whether it has an error code, and the struct and struct-array fields whose classes
# hold one somewhere below (the others, such as a fetch's aborted transactions, are never walked).
_PLANS: dict[type[DataContainer], tuple[bool, tuple[str, ...], tuple[str, ...]]] = {}


def _plan(cls: type[DataContainer]) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    plan = _PLANS.get(cls)
    if plan is None:
        fields = cls.fields
        nested = {name: getattr(cls, field.type_str) for name, field in fields.items()
                  if field.is_struct() or field.is_struct_array()}
        worth = {name for name, child in nested.items() if _holds_codes(child)}
        plan = ("error_code" in fields, tuple(n for n in worth if fields[n].is_struct()),
                tuple(n for n in worth if fields[n].is_struct_array()))
        _PLANS[cls] = plan
    return plan


def _holds_codes(cls: type[DataContainer]) -> bool:
    has_code, structs, arrays = _plan(cls)
    return has_code or bool(structs) or bool(arrays)


def _walk(container: Any, found: dict[int, str | None]) -> None:
    has_code, structs, arrays = _plan(type(container))
    if has_code:
        code = container.error_code
        if code in REFUSAL_CODES and code not in found:
            found[code] = getattr(container, "error_message", None)
    for name in structs:
        child = getattr(container, name)
        if child is not None:
            _walk(child, found)
    for name in arrays:
        for child in getattr(container, name) or ():
            _walk(child, found)
