"""Blocking calls (storage I/O, long polls) off the event loop, in the server's one worker pool."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread

T = TypeVar("T")


async def blocking(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await anyio.to_thread.run_sync(partial(func, *args, **kwargs))
