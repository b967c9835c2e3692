"""The journal's start-up probe: a store that answers success to a second create of one key (it ignores
If-None-Match) is refused with a clear error; one that honours it passes, and the probe key is removed."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakelog.platform.journal.errors import JournalRefused
from lakelog.platform.journal.node import probe_create_only
from lakelog.platform.storage import Storage


class IgnoresCreateOnly(Storage):
    """A store that overwrites where it was asked to create only (what the probe exists to catch)."""

    def put_if_absent(self, uri: str, data: bytes) -> bool:
        self.write_bytes(uri, data)
        return True


def test_a_store_that_ignores_create_only_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JournalRefused, match="does not honour create-only writes"):
        probe_create_only(IgnoresCreateOnly.open(str(tmp_path)))


def test_a_store_that_honours_it_passes_and_keeps_nothing(tmp_path: Path) -> None:
    probe_create_only(Storage.open(str(tmp_path)))
    assert not [p for p in (tmp_path / "_journal" / "probe").iterdir() if not p.name.startswith("_tmp")]
