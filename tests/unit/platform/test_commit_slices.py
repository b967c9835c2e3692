"""The slices an append's commitInfo carries: what a node following the log indexes a shared file by."""

from __future__ import annotations

import json

from lakelog.platform.index import SegmentFile, slices_from_commit, slices_to_commit


def test_slices_survive_the_commit_json() -> None:
    slices = [SegmentFile("f.parquet", 0, 100, 2, 10, 11, 1000, 1001, None, None, 5, (0,)),
              SegmentFile("f.parquet", 3, 300, 40_000, 7, 40_006, 900, 2000, 4, 9, 5, (1, 2, 3)),
              SegmentFile("g.parquet", 1, 50, 1, 0, 0, 1, 1, 7, 7, 6, (0,))]
    carried = json.loads(json.dumps(slices_to_commit(slices)))
    assert set(carried) == {"f.parquet", "g.parquet"}
    assert slices_from_commit("f.parquet", 5, carried["f.parquet"]) == slices[:2]
    assert slices_from_commit("g.parquet", 6, carried["g.parquet"]) == slices[2:]
