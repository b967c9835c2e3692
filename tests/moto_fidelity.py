"""Where moto's S3 differs from S3 in a way lakelog's tests would meet, made to behave as S3 does.

Conditional writes. S3 applies `If-None-Match: *` (and `If-Match`) atomically: of two concurrent
put-if-absent requests for one key, exactly one succeeds. moto's server checks the key, then stores the
object, with nothing between the two for a concurrent request on another thread: under load about one race
in 200 had two winners (`tests/core/test_s3_conditional_writes.py` checks it), the second overwriting the first.
lakelog's commit protocol relies on S3's guarantee (a Delta commit is a put-if-absent of its version's file),
so two writers could both commit one version there. Conditional requests are run one at a time here.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

_CONDITIONS = ("If-None-Match", "If-Match")
_applied = False
_guard = threading.Lock()


def make_conditional_writes_atomic() -> None:
    """In this process's moto server: a conditional PutObject or CompleteMultipartUpload runs alone."""
    global _applied
    with _guard:
        if _applied:
            return
        from moto.s3.responses import S3Response

        one_at_a_time = threading.Lock()

        def atomic(method: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(method)
            def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
                if not any(self.headers.get(name) for name in _CONDITIONS):
                    return method(self, *args, **kwargs)
                with one_at_a_time:
                    return method(self, *args, **kwargs)
            return wrapped

        S3Response.put_object = atomic(S3Response.put_object)  # type: ignore[method-assign]
        S3Response._key_response_post = atomic(S3Response._key_response_post)  # type: ignore[method-assign]
        _applied = True
