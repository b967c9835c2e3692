"""Local writes: put_if_absent refuses a taken name and leaves no temporary file; a forked child (a Spark
worker, say) names its temporary files apart from its parent's."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from lakelog.platform import storage
from lakelog.platform.storage import Storage
from tests.patience import STUCK_S


def test_put_if_absent_takes_a_name_once_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    store = Storage.open(str(tmp_path))
    uri = str(tmp_path / "folder" / "made" / "on-first-write.obj")  # the folder does not exist yet
    assert store.put_if_absent(uri, b"first") is True
    assert store.put_if_absent(uri, b"second") is False
    assert Path(uri).read_bytes() == b"first"
    assert sorted(p.name for p in Path(uri).parent.iterdir()) == ["on-first-write.obj"]


def _child_prefix(queue: multiprocessing.Queue) -> None:
    queue.put(storage._TEMPORARY_PREFIX)


def test_a_forked_child_draws_its_own_temporary_names() -> None:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_prefix, args=(queue,))
    child.start()
    prefix = queue.get(timeout=STUCK_S)
    child.join()
    assert prefix and prefix != storage._TEMPORARY_PREFIX
