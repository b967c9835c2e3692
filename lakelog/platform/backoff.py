"""How long to wait before trying an optimistic change again after it lost a race to another writer.

Full jitter (a random wait up to an exponentially growing cap): writers that lost together do not retry in
lock step, so under contention each attempt has a fair chance instead of the slowest node losing every time.
"""

from __future__ import annotations

import random
from typing import Callable

BASE_S = 0.005
CAP_S = 0.5


def backoff_s(attempt: int, base_s: float = BASE_S, cap_s: float = CAP_S,
              draw: Callable[[], float] = random.random) -> float:
    """The wait before attempt `attempt + 1` (attempt 0 is the first try that lost)."""
    return draw() * min(cap_s, base_s * 2 ** min(attempt, 30))
