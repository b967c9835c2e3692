"""partition_runs: the runs of equal partitions in a sorted array, as the flush assigns offsets by them."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from lakelog.platform.log.commit import partition_runs


@given(st.lists(st.integers(min_value=0, max_value=50), max_size=60))
def test_runs_cover_the_array_once_each_partition_in_one_run(values: list[int]) -> None:
    ordered = np.array(sorted(values), dtype=np.int32)
    runs = partition_runs(ordered)
    # Rebuilt from the runs, the array is the same; each partition appears in exactly one run.
    rebuilt = [p for p, start, end in runs for _ in range(end - start)]
    assert rebuilt == ordered.tolist()
    assert [p for p, _, _ in runs] == sorted(set(values))
    assert all(start < end for _, start, end in runs)
    assert all(runs[i][2] == runs[i + 1][1] for i in range(len(runs) - 1))


def test_one_partition_is_one_run() -> None:
    assert partition_runs(np.array([4, 4, 4], dtype=np.int32)) == [(4, 0, 3)]
    assert partition_runs(np.array([], dtype=np.int32)) == []
