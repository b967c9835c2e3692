"""Forwarded produce by reference, its storage part: the sender's PUT, DELETE and start-up sweep of its
forward objects, and the leader's GET (reference.py says what they hold).

Per group-send: one PUT and one DELETE on the sender, one GET on the leader (in-region object requests
cost no transfer between zones; forwarding the bytes does). The sender deletes the object once the leader
answered or the call failed; an object left by a crash between the two is deleted at the node's next start.
"""

from __future__ import annotations

import logging
from typing import Sequence

from lakelog.platform.cluster.errors import ForwardedObjectMismatch, ForwardedObjectMissing
from lakelog.platform.cluster.reference import ProduceReference, calls_in, forwards_path, new_object_key, reference_to
from lakelog.platform.cluster.wire import ForwardedCall
from lakelog.platform.errors import StorageUnavailable
from lakelog.platform.storage import STORAGE_ERRORS, Storage, describe_storage_error

log = logging.getLogger(__name__)


class ForwardObjects:
    """One node's forward objects (`_journal/forwards/<journal node>/`)."""

    def __init__(self, storage: Storage, node: str) -> None:
        self.storage = storage
        self.node = node

    def put(self, body: bytes, calls: Sequence[ForwardedCall]) -> ProduceReference:
        """The calls' body as a new object; StorageUnavailable (retriable) when the PUT fails."""
        key = new_object_key(self.node)
        try:
            self.storage.write_bytes(self.storage.uri(key), body)
        except STORAGE_ERRORS as exc:
            raise StorageUnavailable(f"forward object {key} not written: "
                                     f"{describe_storage_error(self.storage, exc)}") from None
        return reference_to(key, body, list(calls))

    def delete(self, reference: ProduceReference) -> None:
        """Best effort: an object left behind goes at the next start (`sweep`)."""
        try:
            self.storage.delete_files([self.storage.uri(reference.object)])
        except STORAGE_ERRORS as exc:
            log.warning("forward object %s not deleted: %s", reference.object, exc)

    def sweep(self) -> int:
        """Delete the objects an earlier run of this node left (a crash between PUT and DELETE): their calls
        were never acknowledged by this node. Best effort; how many were deleted."""
        folder = self.storage.uri(forwards_path(self.node))
        try:
            names = self.storage.list_names(folder)
            self.storage.delete_files([f"{folder}/{name}" for name in names])
        except STORAGE_ERRORS as exc:
            log.warning("forward objects under %s not swept: %s", folder, exc)
            return 0
        if names:
            log.info("deleted %d forward objects an earlier run left under %s", len(names), folder)
        return len(names)


def read_forwarded(storage: Storage, reference: ProduceReference) -> list[ForwardedCall]:
    """The leader's side: the calls the reference names, checked against it. ForwardedObjectMissing
    (retriable) when the object is gone, ForwardedObjectMismatch when it is not what the reference says,
    StorageUnavailable when the GET fails; nothing is written in any of those cases."""
    try:
        data = storage.read_bytes(storage.uri(reference.object))
    except FileNotFoundError:
        log.warning("forward object %s is gone (its sender gave up on the call)", reference.object)
        raise ForwardedObjectMissing(f"forward object {reference.object} is not there: nothing was written; "
                                     "retry") from None
    except STORAGE_ERRORS as exc:
        raise StorageUnavailable(f"forward object {reference.object} not read: "
                                 f"{describe_storage_error(storage, exc)}") from None
    try:
        return calls_in(reference, data)
    except ForwardedObjectMismatch as exc:
        log.error("forwarded produce refused: %s", exc)
        raise
