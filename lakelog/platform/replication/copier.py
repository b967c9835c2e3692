"""Copies a Delta table from one site to another, commit for commit.

A follower holds the same table as the leader, version for version: the same
data files (copied, sha256 checked) and the same commit files, copied byte for
byte, so the SetTransaction high watermarks, and so the offsets, are the same
everywhere. A version's data files are copied before its commit file, and the
commit file is written put-if-absent: a copy killed midway leaves no visible
commit, and a restarted copy skips the files already there (same size and
checksum) instead of copying them twice.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import unquote

import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakelog.platform.delta.delta_log import (
    DELTA_LOG,
    LAST_CHECKPOINT,
    added_paths,
    checkpoint_name,
    commit_uri,
    file_version,
    latest_version,
    versions,
)
from lakelog.platform.replication.errors import ReplicaDiverged
from lakelog.platform.storage import Storage

# Copies a batch of data files (paths relative to the table); the Spark job passes one that runs on executors.
FileCopier = Callable[[list[str]], "CopyStats"]


@dataclass
class CopyStats:
    files: int = 0
    bytes: int = 0
    skipped: int = 0

    def __iadd__(self, other: CopyStats) -> CopyStats:
        self.files += other.files
        self.bytes += other.bytes
        self.skipped += other.skipped
        return self


@dataclass
class CopyReport:
    table: str
    from_version: int
    to_version: int
    stats: CopyStats = field(default_factory=CopyStats)

    @property
    def versions(self) -> int:
        return max(self.to_version - self.from_version, 0)


def copy_file(source: Storage, target: Storage, source_uri: str, target_uri: str) -> CopyStats:
    """Copy one file, checking its sha256 on arrival; skip it when the target already holds it."""
    data = source.read_bytes(source_uri)
    digest = hashlib.sha256(data).hexdigest()
    if target.size(target_uri) == len(data) and hashlib.sha256(target.read_bytes(target_uri)).hexdigest() == digest:
        return CopyStats(skipped=1)
    target.write_bytes(target_uri, data)
    if hashlib.sha256(target.read_bytes(target_uri)).hexdigest() != digest:
        raise OSError(f"checksum mismatch after copying {source_uri} to {target_uri}")
    return CopyStats(files=1, bytes=len(data))


def thread_copier(source: Storage, target: Storage, source_table: str, target_table: str,
                  threads: int = 8) -> FileCopier:
    def copy(paths: list[str]) -> CopyStats:
        total = CopyStats()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            for stats in pool.map(lambda p: copy_file(source, target, f"{source_table}/{p}",
                                                      f"{target_table}/{p}"), paths):
                total += stats
        return total

    return copy


class TableReplicator:
    """Brings `target` (a follower's copy of a table) up to `source` (the leader's), in version order."""

    def __init__(self, source: Storage, target: Storage, table_path: str,
                 copier: FileCopier | None = None) -> None:
        self.source, self.target = source, target
        self.table_path = table_path
        self.source_table = source.uri(table_path)
        self.target_table = target.uri(table_path)
        self.copier = copier or thread_copier(source, target, self.source_table, self.target_table)

    def source_version(self) -> int:
        return latest_version(self.source, self.source_table)

    def target_version(self) -> int:
        return latest_version(self.target, self.target_table)

    def last_common_version(self) -> int:
        """The newest version both hold byte for byte (-1 when none).

        Versions older than the source's oldest kept commit file cannot be
        compared any more; they were copied from it, so they count as common.
        """
        mine = versions(self.target, self.target_table)
        theirs = set(versions(self.source, self.source_table))
        oldest = min(theirs) if theirs else 0
        for version in reversed(mine):
            if version < oldest:
                return version
            if version in theirs and self._commit(self.target, self.target_table, version) == \
                    self._commit(self.source, self.source_table, version):
                return version
        return -1

    def diverged(self) -> bool:
        return self.last_common_version() < self.target_version()

    def truncate_after(self, version: int) -> list[int]:
        """Remove the target's commits (and checkpoints) above `version`: Kafka's truncation to the HW."""
        removed = []
        for name in self.target.list_names(f"{self.target_table}/{DELTA_LOG}"):
            found = file_version(name)
            if found is not None and found > version:
                self.target.delete_files([f"{self.target_table}/{DELTA_LOG}/{name}"])
                if name.endswith(".json"):
                    removed.append(found)
        last = f"{self.target_table}/{DELTA_LOG}/{LAST_CHECKPOINT}"
        if self.target.size(last) is not None and json.loads(self.target.read_bytes(last))["version"] > version:
            self.target.delete_files([last])
        return sorted(removed)

    def catch_up(self, up_to: int | None = None) -> CopyReport:
        """Copy the missing versions: all their data files first (one copier call, so a Spark copier
        runs them in parallel on executors), then checkpoints and commit files in version order."""
        start = self.target_version()
        if start >= 0 and self.diverged():
            raise ReplicaDiverged(
                f"{self.target_table} holds commits beyond version {self.last_common_version()} that "
                f"{self.source_table} does not; truncate it first"
            )
        kept = versions(self.source, self.source_table)
        end = (kept[-1] if kept else -1) if up_to is None else up_to
        report = CopyReport(self.table_path, start, start)
        if kept and start + 1 < kept[0]:
            # The leader no longer keeps the commits this follower lacks: start from its checkpoint.
            start = self._copy_checkpoint(report)
        commits = {v: self._commit(self.source, self.source_table, v) for v in range(start + 1, end + 1)}
        files = [path for commit in commits.values() for path in added_paths(commit)]
        if files:
            report.stats += self.copier(files)
        for version, commit in commits.items():
            report.stats += self._write_commit(version, commit)
            report.to_version = version
        self._copy_checkpoint_hint(report.to_version)
        self._forget_older_than(kept[0] if kept else 0)
        return report

    def _copy_checkpoint(self, report: CopyReport) -> int:
        """Copy the leader's latest checkpoint and every file it references; its version is returned."""
        hint = json.loads(self.source.read_bytes(f"{self.source_table}/{DELTA_LOG}/{LAST_CHECKPOINT}"))
        version = int(hint["version"])
        name = f"{DELTA_LOG}/{checkpoint_name(version)}"
        with self.source.open_input(f"{self.source_table}/{name}") as source:
            adds = pq.read_table(source, columns=["add"]).column("add")
        paths = [unquote(p) for p in pc.struct_field(adds, "path").to_pylist() if p is not None]
        report.stats += self.copier(paths)
        report.stats += copy_file(self.source, self.target, f"{self.source_table}/{name}",
                                  f"{self.target_table}/{name}")
        report.to_version = version
        return version

    def _forget_older_than(self, oldest: int) -> None:
        """Keep the follower's log as short as the leader's: drop commit files the leader no longer keeps."""
        if oldest <= 0:
            return
        names = self.target.list_names(f"{self.target_table}/{DELTA_LOG}")
        checkpoints = sorted(v for n in names if n.endswith(".parquet") and (v := file_version(n)) is not None)
        if not checkpoints:
            return  # the commits are all this follower has to read its table from
        keep_from = min(oldest, checkpoints[-1])  # never the latest checkpoint or what follows it
        self.target.delete_files([f"{self.target_table}/{DELTA_LOG}/{n}" for n in names
                                  if (v := file_version(n)) is not None and v < keep_from])

    def _write_commit(self, version: int, commit: bytes) -> CopyStats:
        stats = CopyStats()
        checkpoint = f"{DELTA_LOG}/{checkpoint_name(version)}"
        if self.source.size(f"{self.source_table}/{checkpoint}") is not None:
            stats += copy_file(self.source, self.target, f"{self.source_table}/{checkpoint}",
                               f"{self.target_table}/{checkpoint}")
        target_commit = commit_uri(self.target_table, version)
        if not self.target.put_if_absent(target_commit, commit):
            if self.target.read_bytes(target_commit) != commit:
                raise ReplicaDiverged(f"{self.target_table} version {version} differs from the leader's")
        return stats

    @staticmethod
    def _commit(storage: Storage, table_uri: str, version: int) -> bytes:
        return storage.read_bytes(commit_uri(table_uri, version))

    def _copy_checkpoint_hint(self, version: int) -> None:
        hint = f"{DELTA_LOG}/{LAST_CHECKPOINT}"
        if self.source.size(f"{self.source_table}/{hint}") is None:
            return
        data = self.source.read_bytes(f"{self.source_table}/{hint}")
        at = int(json.loads(data)["version"])
        if at > version:
            return
        # The leader checkpoints off its produce path: the checkpoint may be newer than the commit
        # copied with it. A hint goes only where the checkpoint it names already is.
        checkpoint = f"{DELTA_LOG}/{checkpoint_name(at)}"
        if self.target.size(f"{self.target_table}/{checkpoint}") is None:
            if self.source.size(f"{self.source_table}/{checkpoint}") is None:
                return
            copy_file(self.source, self.target, f"{self.source_table}/{checkpoint}",
                      f"{self.target_table}/{checkpoint}")
        self.target.write_bytes(f"{self.target_table}/{hint}", data)

