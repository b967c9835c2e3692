"""The slices of shared files as an append's commitInfo carries them (what a node following the log indexes a
shared file by), and as the slices cache beside the log holds them (what a reopening node indexes by)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from lakelog.platform.segments.index import SegmentFile, SlicesCache, slices_from_commit, slices_from_table, slices_to_commit


def test_slices_survive_the_commit_json() -> None:
    slices = [SegmentFile("f.parquet", 0, 100, 2, 10, 11, 1000, 1001, None, None, 5, (0,)),
              SegmentFile("f.parquet", 3, 300, 40_000, 7, 40_006, 900, 2000, 4, 9, 5, (1, 2, 3)),
              SegmentFile("g.parquet", 1, 50, 1, 0, 0, 1, 1, 7, 7, 6, (0,))]
    carried = json.loads(json.dumps(slices_to_commit(slices)))
    assert set(carried) == {"f.parquet", "g.parquet"}
    assert slices_from_commit("f.parquet", 5, carried["f.parquet"]) == slices[:2]
    assert slices_from_commit("g.parquet", 6, carried["g.parquet"]) == slices[2:]


def _slices(path: str, partitions: range, mtime: int) -> list[SegmentFile]:
    return [SegmentFile(path, p, 10 + p, 1, 100 * mtime + p, 100 * mtime + p, mtime, mtime, None if p else 3,
                        None if p else 4, mtime, (p,)) for p in partitions]


def test_the_slices_cache_keeps_files_still_shared_and_adds_new_ones() -> None:
    cache = SlicesCache()
    first = {"a.parquet": _slices("a.parquet", range(3), 1), "b.parquet": _slices("b.parquet", range(2), 2)}
    assert slices_from_table(cache.rows(first)) == first
    # a.parquet was rolled away, c.parquet is new: b's rows are kept as they were, c's converted
    second = {"b.parquet": first["b.parquet"], "c.parquet": _slices("c.parquet", range(4), 3)}
    assert slices_from_table(cache.rows(second)) == second
    assert slices_from_table(cache.rows({})) == {}


def test_the_slices_cache_rows_come_back_through_parquet() -> None:
    shared = {"a.parquet": _slices("a.parquet", range(2), 1)}
    sink = pa.BufferOutputStream()
    pq.write_table(SlicesCache().rows(shared), sink)
    assert slices_from_table(pq.read_table(pa.BufferReader(sink.getvalue()))) == shared
