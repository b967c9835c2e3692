"""Forwarded produce by reference (with the node journal on), its pure part: the reference a non-leader sends
the leader instead of the calls' bytes, and the leader's checks of the object it names.

The object holds the node-to-node call's body as `wire.encode_calls` makes it, at
`_journal/forwards/<sender's journal node>/<32 hex digits>.arrow`; the reference (JSON) names it and gives
its size, rows and calls, which the leader checks before anything is written.
"""

from __future__ import annotations

import builtins
import re
import uuid
from dataclasses import asdict, dataclass

import orjson

from lakelog.platform.cluster.errors import ForwardedObjectMismatch
from lakelog.platform.cluster.wire import ForwardedCall, decode_calls
from lakelog.platform.journal.objects import JOURNAL

FORWARDS = f"{JOURNAL}/forwards"
SUFFIX = ".arrow"
# Only a forward object: a reference never makes the leader read anything else under the root.
_OBJECT = re.compile(rf"{FORWARDS}/(?!\.\.?/)[A-Za-z0-9._-]+/[0-9a-f]{{32}}\{SUFFIX}")
_FIELDS = ("object", "bytes", "rows", "calls")


def forwards_path(node: str) -> str:
    """One node's forward objects, relative to the root."""
    return f"{FORWARDS}/{node}"


def new_object_key(node: str) -> str:
    return f"{forwards_path(node)}/{uuid.uuid4().hex}{SUFFIX}"


@dataclass(frozen=True)
class ProduceReference:
    object: str  # the key relative to the root
    bytes: int
    rows: int
    calls: int

    def encode(self) -> builtins.bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def decode(cls, data: builtins.bytes) -> ProduceReference:
        """Raises ValueError on a body that is not a reference to a forward object."""
        try:
            found = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not a forwarded produce reference: {exc}") from None
        if not isinstance(found, dict) or sorted(found) != sorted(_FIELDS):
            raise ValueError(f"a forwarded produce reference has exactly the fields {', '.join(_FIELDS)}")
        if not isinstance(found["object"], str) or not _OBJECT.fullmatch(found["object"]):
            raise ValueError(f"a forwarded produce reference names an object under {FORWARDS}/<node>/, "
                             f"got {found['object']!r}")
        for name in _FIELDS[1:]:
            value = found[name]
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"a forwarded produce reference's {name} is an integer >= 1, got {value!r}")
        return cls(**found)


def reference_to(key: str, body: bytes, calls: list[ForwardedCall]) -> ProduceReference:
    return ProduceReference(key, len(body), sum(call.table.num_rows for call in calls), len(calls))


def calls_in(reference: ProduceReference, data: bytes) -> list[ForwardedCall]:
    """The calls of the object's bytes, refused (ForwardedObjectMismatch) unless they are what the reference
    says: its size, then its rows and calls once decoded."""
    if len(data) != reference.bytes:
        raise ForwardedObjectMismatch(f"forward object {reference.object} is {len(data)} bytes, its reference "
                                      f"says {reference.bytes}")
    try:
        calls = decode_calls(data)
    except ValueError as exc:
        raise ForwardedObjectMismatch(f"forward object {reference.object}: {exc}") from None
    rows = sum(call.table.num_rows for call in calls)
    if (rows, len(calls)) != (reference.rows, reference.calls):
        raise ForwardedObjectMismatch(f"forward object {reference.object} holds {rows} rows in {len(calls)} "
                                      f"calls, its reference says {reference.rows} in {reference.calls}")
    return calls
