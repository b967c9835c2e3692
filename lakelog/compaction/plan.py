"""Which files of a partition a roll or a compaction rewrites, decided from file statistics only.

A partition's files are sorted by offset. The last file is the active segment
(the head, still growing by new small files); every file before it is a
closed segment. Rewrites always take a run of consecutive files, so the
offsets a rewrite covers stay contiguous with its neighbours.

Slices of files holding several partitions (layout 2's flushes, see platform/segments/segment.py) are never
closed: only a roll removes them, rewriting every partition's slice of the file in one commit. So a roll
always takes them, in runs of their own (a run never mixes them with other files): even a single slice, and
whatever its size (a big flush's slice alone reaches segment.bytes). A run closed by size or age is a
finished segment; any other (reason "intake") stays a small file that later rolls merge into segments by size
and age as any small files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lakelog.platform.segments.index import SegmentFile


def is_segment(segment: SegmentFile) -> bool:
    """Written by a roll or a compaction (see rewrite.SEGMENT_MARK): a finished segment."""
    return "-seg-" in segment.path.rsplit("/", 1)[-1]

# A file at least this fraction of segment.bytes is a finished segment: rolls
# never rewrite it again (a rewrite of it would only add a few small files).
FULL_FRACTION = 0.5


@dataclass(frozen=True)
class RollGroup:
    """Consecutive small files of one partition to merge into segments of about `target_bytes`."""

    partition: int
    inputs: tuple[SegmentFile, ...]
    target_bytes: int
    reason: str  # "size", "age" or "intake" (it holds slices of shared files)

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.inputs)


@dataclass(frozen=True)
class CompactionPlan:
    """The closed, old-enough prefix of one partition: the range log compaction cleans."""

    partition: int
    inputs: tuple[SegmentFile, ...]
    target_bytes: int

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.inputs)


def closed_segments(files: Sequence[SegmentFile]) -> list[SegmentFile]:
    """All files but the active segment (the one holding the highest offsets), up to the first slice of
    a shared file."""
    ordered = _before_a_hole(sorted(files, key=lambda f: f.min_offset))[:-1]
    shared = next((i for i, f in enumerate(ordered) if f.shared), len(ordered))
    return ordered[:shared]


def _before_a_hole(ordered: list[SegmentFile]) -> list[SegmentFile]:
    """The files up to the first hole in their offsets: an open transaction's reserved offsets, filled in
    when it ends (platform/log/reservations.py). A rewrite across it would cover offsets its records will
    take."""
    for i in range(1, len(ordered)):
        if ordered[i].min_offset > ordered[i - 1].max_offset + 1:
            return ordered[:i]
    return ordered


def plan_roll(partition: int, files: Sequence[SegmentFile], segment_bytes: int, segment_ms: int,
              now_ms: int) -> list[RollGroup]:
    """Groups of consecutive small files: closed once they reach `segment_bytes`, or
    once the oldest of them is `segment_ms` old. Single files are left alone, but for slices of shared
    files, which are always rolled (see the module's docstring)."""
    groups: list[RollGroup] = []
    run: list[SegmentFile] = []

    def close(reason: str) -> None:
        # Shared slices are rolled whatever closed their run, even alone: every partition's slice of a
        # shared file must go in one commit, and retention and compaction wait for them. (A lone slice
        # that reached segment.bytes was once left alone: a big flush then blocked compaction for good.)
        if any(f.shared for f in run):
            groups.append(RollGroup(partition, tuple(run), segment_bytes, "intake" if reason == "none" else reason))
        elif len(run) > 1 and reason != "none":
            groups.append(RollGroup(partition, tuple(run), segment_bytes, reason))
        run.clear()

    for segment in sorted(files, key=lambda f: f.min_offset):
        if run and (run[-1].shared != segment.shared or segment.min_offset > run[-1].max_offset + 1):
            # a hole (an open transaction's offsets, see _before_a_hole) ends a run: never merged across
            close("age" if _aged(run, segment_ms, now_ms) else "none")
        if not segment.shared and (segment.size_bytes >= segment_bytes * FULL_FRACTION or is_segment(segment)):
            close("age" if _aged(run, segment_ms, now_ms) else "none")
            continue
        run.append(segment)
        if sum(f.size_bytes for f in run) >= segment_bytes:
            close("size")
    close("age" if _aged(run, segment_ms, now_ms) else "none")
    return groups


def _aged(run: Sequence[SegmentFile], segment_ms: int, now_ms: int) -> bool:
    # A run that has been open for segment.ms is rolled whatever its size, as Kafka rolls
    # a segment whose first record is that old. The file's write time is the segment's age.
    return bool(run) and now_ms - min(f.modification_time_ms for f in run) >= segment_ms


def plan_compaction(partition: int, files: Sequence[SegmentFile], min_compaction_lag_ms: int,
                    segment_bytes: int, now_ms: int) -> CompactionPlan | None:
    """The prefix of closed segments whose records are all older than min.compaction.lag.ms."""
    inputs: list[SegmentFile] = []
    for segment in closed_segments(files):
        if now_ms - segment.max_timestamp_ms < min_compaction_lag_ms:
            break  # this and everything after it is too recent: compaction stays a prefix
        inputs.append(segment)
    if not inputs:
        return None
    return CompactionPlan(partition, tuple(inputs), segment_bytes)
