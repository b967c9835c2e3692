"""The client's error types, named as confluent-kafka names them (KafkaError inside a KafkaException).

Codes are the server's `error_code` strings (Kafka's names), plus client-side ones with a leading
underscore as librdkafka spells them: `_TRANSPORT` (no answer), `_TIMED_OUT`, `_MSG_TIMED_OUT`,
`_STATE`, `_INVALID_ARG`, `_NOT_IMPLEMENTED`.
"""

from __future__ import annotations

import builtins

TRANSPORT = "_TRANSPORT"
TIMED_OUT = "_TIMED_OUT"
MSG_TIMED_OUT = "_MSG_TIMED_OUT"
STATE = "_STATE"
INVALID_ARG = "_INVALID_ARG"
NOT_IMPLEMENTED = "_NOT_IMPLEMENTED"


class KafkaError:
    """One error: its code, a message, and whether retrying the same request may succeed."""

    __slots__ = ("_code", "_message", "_retriable", "_status", "_fatal", "retry_after_s")

    def __init__(self, code: str, message: str = "", retriable: bool = False, status: int | None = None,
                 fatal: bool = False) -> None:
        self._code = code
        self._message = message
        self._retriable = retriable
        self._status = status
        self._fatal = fatal
        self.retry_after_s = 0.0  # the server's Retry-After, when it sent one

    def code(self) -> str:
        return self._code

    def name(self) -> str:
        return self._code

    def str(self) -> builtins.str:
        return self._message or self._code

    def retriable(self) -> bool:
        return self._retriable

    def fatal(self) -> bool:
        return self._fatal

    def status(self) -> int | None:
        """The HTTP status of the answer, None when there was no answer."""
        return self._status

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KafkaError):
            return self._code == other._code
        return self._code == other

    def __hash__(self) -> int:
        return hash(self._code)

    def __repr__(self) -> builtins.str:
        return f"KafkaError({self._code}, {self._message!r}, retriable={self._retriable})"

    def __str__(self) -> builtins.str:
        return f"{self._code}: {self._message}" if self._message else self._code


class KafkaException(Exception):
    """Raised by the client; `args[0]` is the KafkaError, as in confluent-kafka."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(error)

    @property
    def error(self) -> KafkaError:
        return self.args[0]

    def __str__(self) -> builtins.str:
        return str(self.args[0])
