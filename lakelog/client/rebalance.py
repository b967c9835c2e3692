"""What a consumer does when the server's assignment changes (pure, no I/O).

Eager (range, roundrobin): Kafka calls on_revoke with the whole old assignment and on_assign with the
whole new one; only partitions really gone are given up (their unread records dropped). Cooperative
(cooperative-sticky): only the partitions the server asks back are revoked, only new ones assigned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TP = tuple[str, int]


@dataclass(frozen=True)
class Changes:
    give_up: set[TP] = field(default_factory=set)  # drop buffered records, forget positions
    revoke: set[TP] = field(default_factory=set)  # on_revoke's argument (empty: no call)
    assign: set[TP] | None = None  # on_assign's argument (None: no call)
    target: set[TP] = field(default_factory=set)  # the assignment afterwards


def changes(current: set[TP], server: set[TP] | None, told: set[TP], cooperative: bool) -> Changes:
    """`current`: what the application holds; `server`: the last heartbeat's assignment (None before
    the first); `told`: partitions the server asked back (cooperative) and not yet given up."""
    if cooperative:
        gone = (current - server) if server is not None else set()
        give_up = (told | gone) & current
        kept = current - give_up
        target = (server - told) if server is not None else kept
        added = target - kept
        return Changes(give_up, give_up, added or None, target)
    if server is None or server == current:
        return Changes(target=set(current))
    return Changes(current - server, set(current), set(server), set(server))
