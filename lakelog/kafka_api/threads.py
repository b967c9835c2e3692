"""Blocking calls (storage I/O, long polls) off the event loop, in the server's one worker pool."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, TypeVar

import anyio.to_thread

T = TypeVar("T")


async def blocking(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await anyio.to_thread.run_sync(partial(func, *args, **kwargs))
