"""The tail cache: contiguous records from an offset, chunks kept by start whatever order they come in, the
oldest evicted first past the byte budget."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.platform.log.tail_cache import TailCache


def records(start: int, count: int) -> pa.Table:
    return pa.table({"offset": pa.array(range(start, start + count), pa.int64())})


def offsets(pieces: list[pa.Table]) -> list[int]:
    return [o for piece in pieces for o in piece.column("offset").to_pylist()]


def test_a_read_follows_chunks_from_the_offset_and_stops_at_a_gap() -> None:
    cache = TailCache(10**9)
    for start, count in [(10, 5), (0, 10), (20, 5)]:  # out of order; 15..19 missing
        cache.put(0, records(start, count), start)
    assert offsets(cache.read(0, 3, 100)) == list(range(3, 15))
    assert offsets(cache.read(0, 3, 4)) == [3, 4, 5, 6]
    assert cache.read(0, 15, 10) == []  # not cached
    assert offsets(cache.read(0, 22, 10)) == [22, 23, 24]
    assert cache.read(1, 0, 10) == []


def test_the_oldest_chunks_go_first_past_the_budget() -> None:
    size = records(0, 10).nbytes
    cache = TailCache(2 * size)
    for start in (0, 10, 20):
        cache.put(0, records(start, 10), start)
    assert cache.read(0, 0, 100) == []
    assert offsets(cache.read(0, 10, 100)) == list(range(10, 30))
    cache.drop_partition(0)
    assert cache.read(0, 10, 100) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=30),
       st.permutations(range(30)), st.integers(0, 120), st.integers(1, 50))
def test_reads_match_the_chunks_kept(sizes: list[tuple[int, int]], order: list[int], offset: int,
                                     max_records: int) -> None:
    """Chunks of consecutive offsets per partition, put in any order: a read gives exactly the run of
    cached offsets from `offset`, up to `max_records`."""
    chunks = []
    ends: dict[int, int] = {}
    for partition, count in sizes:
        start = ends.get(partition, 0)
        chunks.append((partition, start, count))
        ends[partition] = start + count
    cache = TailCache(10**9)
    for i in [i for i in order if i < len(chunks)]:
        partition, start, count = chunks[i]
        cache.put(partition, records(start, count), start)
    for partition in ends:
        cached = {o for p, s, c in chunks if p == partition for o in range(s, s + c)}
        expected = []
        while offset + len(expected) in cached and len(expected) < max_records:
            expected.append(offset + len(expected))
        assert offsets(cache.read(partition, offset, max_records)) == expected
