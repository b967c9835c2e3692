"""A node's forward objects on a real (local) store: written, read back by the leader, deleted, swept at
start; a missing object is a retriable error."""

from __future__ import annotations

import numpy as np
import pytest

from lakelog.platform.cluster.errors import ForwardedObjectMismatch, ForwardedObjectMissing
from lakelog.platform.cluster.forward_objects import ForwardObjects, read_forwarded
from lakelog.platform.cluster.reference import ProduceReference, forwards_path
from lakelog.platform.cluster.wire import ForwardedCall, encode_calls
from lakelog.platform.errors import StorageUnavailable
from lakelog.platform.records import RecordColumns, columns_to_table
from lakelog.platform.storage import Storage


def _calls() -> list[ForwardedCall]:
    columns = RecordColumns([b"k", b"k"], [b"v1", b"v2"], None, [1_700_000_000_000] * 2)
    return [ForwardedCall(columns_to_table([columns]), np.array([0, 1], dtype=np.int32), 1, 2500)]


def _left(storage: Storage, node: str) -> list[str]:
    return storage.list_names(storage.uri(forwards_path(node)))


def test_an_object_is_read_by_the_leader_then_deleted(tmp_path) -> None:
    storage = Storage.open(str(tmp_path))
    objects = ForwardObjects(storage, "n1")
    calls = _calls()
    reference = objects.put(encode_calls(calls), calls)
    assert _left(storage, "n1") == [reference.object.rsplit("/", 1)[1]]
    got = read_forwarded(Storage.open(str(tmp_path)), reference)  # the leader's own handle on the root
    assert got[0].table.equals(calls[0].table) and got[0].partitions.tolist() == [0, 1]
    objects.delete(reference)
    objects.delete(reference)  # twice: already gone is fine
    assert _left(storage, "n1") == []
    with pytest.raises(ForwardedObjectMissing) as refused:
        read_forwarded(storage, reference)
    assert refused.value.retriable


def test_a_changed_object_is_refused(tmp_path) -> None:
    storage = Storage.open(str(tmp_path))
    calls = _calls()
    reference = ForwardObjects(storage, "n1").put(encode_calls(calls), calls)
    storage.write_bytes(storage.uri(reference.object), b"x" * reference.bytes)
    with pytest.raises(ForwardedObjectMismatch):
        read_forwarded(storage, ProduceReference(reference.object, reference.bytes, reference.rows, reference.calls))


def test_a_start_sweeps_only_its_own_leftovers(tmp_path) -> None:
    storage = Storage.open(str(tmp_path))
    calls = _calls()
    mine, other = ForwardObjects(storage, "n1"), ForwardObjects(storage, "n2")
    for _ in range(3):
        mine.put(encode_calls(calls), calls)
    theirs = other.put(encode_calls(calls), calls)
    assert ForwardObjects(storage, "n1").sweep() == 3
    assert _left(storage, "n1") == [] and _left(storage, "n2") == [theirs.object.rsplit("/", 1)[1]]
    assert ForwardObjects(storage, "n3").sweep() == 0  # nothing there yet


def test_a_failed_put_is_a_retriable_error(tmp_path) -> None:
    blocker = tmp_path / "_journal"
    blocker.write_bytes(b"a file where the folder would go")
    objects = ForwardObjects(Storage.open(str(tmp_path)), "n1")
    calls = _calls()
    with pytest.raises(StorageUnavailable) as refused:
        objects.put(encode_calls(calls), calls)
    assert refused.value.retriable
