"""The share consumer's acknowledgements, pure (no I/O): the records poll() handed out, the types the
application chose for them, and what the next acknowledgement sends, grouped per partition and type as the
HTTP API takes them (`POST /v1/share-groups/{group}/members/{member}/acks`, or a poll's `acks`).

Implicit mode (share.acknowledgement.mode=implicit, the default): every record handed out and not
acknowledged otherwise is accepted by the next poll or commit. Explicit mode: only what the application
acknowledged is sent; a record it never acknowledges goes back to the group when its lock runs out.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum
from typing import Any

Key = tuple[str, int, int]  # (topic, partition, offset)


class AcknowledgeType(IntEnum):
    """Kafka's AcknowledgeType (confluent-kafka's names)."""

    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


NAMES = {AcknowledgeType.ACCEPT: "accept", AcknowledgeType.RELEASE: "release", AcknowledgeType.REJECT: "reject"}
MODES = ("implicit", "explicit")


class Acknowledgements:
    """What the application holds and chose. Thread contract: the application's thread only."""

    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"share.acknowledgement.mode must be implicit or explicit, not {mode!r}")
        self.implicit = mode == "implicit"
        self._handed: dict[Key, AcknowledgeType | None] = {}  # handed out, not sent yet; the type chosen if any

    def handed(self, keys: Iterable[Key]) -> None:
        """Records poll() hands to the application."""
        for key in keys:
            self._handed[key] = None

    def choose(self, key: Key, kind: AcknowledgeType) -> None:
        """The application's type for a record it holds (the last call wins until it is sent)."""
        if key not in self._handed:
            raise KeyError(key)
        self._handed[key] = AcknowledgeType(kind)

    def take(self) -> dict[Key, AcknowledgeType]:
        """What the next acknowledgement sends, no longer pending: in implicit mode every record handed out
        (accepted unless chosen otherwise), in explicit mode the ones chosen."""
        if self.implicit:
            taken = {k: kind or AcknowledgeType.ACCEPT for k, kind in self._handed.items()}
            self._handed.clear()
            return taken
        taken = {k: kind for k, kind in self._handed.items() if kind is not None}
        for key in taken:
            del self._handed[key]
        return taken

    def forget(self) -> None:
        """The member is gone (the server released what it held): nothing left to acknowledge."""
        self._handed.clear()

    def pending(self) -> int:
        return len(self._handed)


def wire(acks: dict[Key, AcknowledgeType]) -> list[dict[str, Any]]:
    """The acknowledgements as the HTTP API takes them: one entry per (topic, partition, type), its offsets
    ascending (the server makes ranges of them)."""
    grouped: dict[tuple[str, int, AcknowledgeType], list[int]] = {}
    for (topic, partition, offset), kind in acks.items():
        grouped.setdefault((topic, partition, kind), []).append(offset)
    return [{"topic": t, "partition": p, "offsets": sorted(offsets), "type": NAMES[kind]}
            for (t, p, kind), offsets in sorted(grouped.items())]
