"""Data changes made to a topic table outside lakelog: found at once, and their partitions refused.

Other Delta tools may rewrite a topic's files: OPTIMIZE, Z-ORDER, compaction commit `dataChange=false`
adds and removes that keep the same (partition, offset) records in other files, which lakelog indexes by
their content (content_index.py) and serves on. Any other change of a partition's records from outside —
an append (its offsets are not in the partition's SetTransaction, so lakelog would hand them out again),
a delete, update, merge, overwrite or restore — would make lakelog answer a duplicate offset or skip a
record. lakelog cannot tell what the change meant, so it does not guess: the partition is refused
(`DataChangedOutside` and a WARNING). Records appended beyond the log end are repaired by `lakelog topics
repair` (outside_repair.py): one lakelog commit removes their files and names the partitions it repaired
(`REPAIRED`), and every node whose load reads that commit lifts those refusals; no restart. Any other change
(a delete, an overwrite, offsets held twice) is refused until the table is restored and the node restarted.

Three checks, none on the produce path's steady state:
- every commit of another writer (no `lakelog.commitId` in its commitInfo: lakelog's appends and
  maintenance commits all carry one) that a snapshot load moves past, when files left the index or
  files by content came (`refused_by`; other loads read no commit);
- after every load: no two entries of a partition hold an offset twice (`duplicated`), and none holds
  offsets below the log start the partition had before (`below_log_start`);
- before a partition is read or appended to: none of its entries lies beyond its log end offset, which
  only lakelog's SetTransactions move (`beyond_log_end`). After a restart the commits are not read again:
  the last two checks still find every append from outside.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence
from urllib.parse import unquote

import orjson
import pyarrow as pa

from lakelog.platform.delta.delta_log import COMMIT_ID, commit_uri
from lakelog.platform.errors import DataChangedOutside
from lakelog.platform.segments.content_index import DataFile
from lakelog.platform.segments.index import SegmentFile, SegmentIndex
from lakelog.platform.storage import STORAGE_ERRORS, Storage

log = logging.getLogger(__name__)

EVERY_PARTITION = -1  # a change whose files could not be read: which partitions it touched is unknown
# Commits kept in the log (log.RETAINED_COMMITS): a load further behind may find them cleaned up.
COMMITS_READ_MAX = 100

# commitInfo of lakelog's repair commit (outside_repair.py): the partitions whose records beyond the log end it
# removed. A node reading it lifts their refusals for an append (a refusal of any other change stays).
REPAIRED = "lakelog.repairedPartitions"

Entries = Callable[[DataFile], "list[SegmentFile] | None"]  # a file's index entries; None: it cannot be read


@dataclass(frozen=True)
class Commit:
    """What a commit did to the table's files."""

    version: int
    operation: str
    engine: str
    lakelog: bool  # made by lakelog (an append or a maintenance job): never checked
    added: list[DataFile]
    removed: list[DataFile]
    data_change: bool  # any add or remove marked dataChange=true
    repaired: tuple[int, ...] = ()  # lakelog's repair commit: the partitions it repaired (REPAIRED)

    def describe(self) -> str:
        return f"{self.operation or 'a commit'} by {self.engine or 'another writer'} at version {self.version}"


def parse_commit(version: int, commit: bytes) -> Commit:
    info: dict = {}
    added: list[DataFile] = []
    removed: list[DataFile] = []
    change = False
    for line in commit.splitlines():
        entry = orjson.loads(line) if line.strip() else {}
        info = entry.get("commitInfo", info)
        for kind, files in (("add", added), ("remove", removed)):
            action = entry.get(kind)
            if action is not None:
                change |= bool(action.get("dataChange", True))
                files.append(_data_file(action))
    return Commit(version, str(info.get("operation") or ""), str(info.get("engineInfo") or ""), COMMIT_ID in info,
                  added, removed, change, tuple(int(p) for p in info.get(REPAIRED) or ()) if COMMIT_ID in info else ())


def _data_file(action: dict) -> DataFile:
    value = (action.get("partitionValues") or {}).get("partition")
    when = action.get("modificationTime") or action.get("deletionTimestamp") or 0
    return DataFile(unquote(action["path"]), int(when), int(action.get("size") or 0),
                    None if value is None else int(value), False)


def refused_by(commit: Commit, entries_of: Entries) -> dict[int, str]:
    """The partitions whose records another writer's commit changed, with why. A rewrite (every action
    dataChange=false) is fine when each partition keeps its records: as many, at offsets the files it
    removed held."""
    if commit.lakelog or not (commit.added or commit.removed):
        return {}  # lakelog's own, or no file changed (a VACUUM's commits, a property change)
    removed = [entries_of(f) for f in commit.removed]
    added = [entries_of(f) for f in commit.added]
    if any(entries is None for entries in removed + added):
        return {EVERY_PARTITION: f"{commit.describe()} changed files that could not be read"}
    before = [s for entries in removed for s in entries or ()]
    after = [s for entries in added for s in entries or ()]
    if commit.data_change:
        touched = sorted({s.partition for s in before + after})
        return {p: f"{commit.describe()} changed its records (dataChange=true)" for p in touched}
    return {p: f"{commit.describe()} rewrote its files (dataChange=false) without keeping its records"
            for p in changed_records(before, after)}


def changed_records(before: Sequence[SegmentFile], after: Sequence[SegmentFile]) -> list[int]:
    """Partitions whose records the files `after` do not keep from the files `before`: another count, or an
    offset outside the ranges the files before held."""
    changed = []
    for partition in sorted({s.partition for s in [*before, *after]}):
        old = [s for s in before if s.partition == partition]
        new = [s for s in after if s.partition == partition]
        spans = _union((s.min_offset, s.max_offset) for s in old)
        if sum(s.num_records for s in old) != sum(s.num_records for s in new) or not all(
                any(lo <= s.min_offset and s.max_offset <= hi for lo, hi in spans) for s in new if s.num_records):
            changed.append(partition)
    return changed


def _union(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive ranges merged where they touch or overlap."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def duplicated(files: Sequence[SegmentFile]) -> str | None:
    """Why a partition's entries (in offset order) hold an offset twice; None when they do not."""
    for earlier, entry in zip([None, *files], files):
        if entry.num_records > entry.max_offset - entry.min_offset + 1:
            return (f"{entry.path} holds {entry.num_records} records at the {entry.max_offset - entry.min_offset + 1}"
                    f" offsets {entry.min_offset}..{entry.max_offset}")
        if earlier is not None and entry.min_offset <= earlier.max_offset:
            return (f"{earlier.path} and {entry.path} both hold offsets from {entry.min_offset} to "
                    f"{min(entry.max_offset, earlier.max_offset)}")
    return None


def below_log_start(files: Sequence[SegmentFile], before: Sequence[SegmentFile]) -> str | None:
    """Why a partition's entries hold records below the log start it had (`before`: its entries then):
    lakelog never writes there (its rewrites keep their ranges), another writer's append did."""
    if files and before and files[0].min_offset < before[0].min_offset:
        return (f"{files[0].path} holds offsets from {files[0].min_offset}, below the log start offset "
                f"{before[0].min_offset} (records appended by another writer)")
    return None


def beyond_log_end(files: Sequence[SegmentFile], log_end_offset: int) -> str | None:
    """Why a partition's entries (in offset order) hold records its SetTransaction never gave out."""
    if files and files[-1].max_offset >= log_end_offset:
        return (f"{files[-1].path} holds offsets up to {files[-1].max_offset}, beyond the log end offset "
                f"{log_end_offset} (records appended by another writer)")
    return None


def entries_by_path(index: SegmentIndex) -> dict[str, list[SegmentFile]]:
    found: dict[str, list[SegmentFile]] = {}
    for partition in index.partitions.values():
        for entry in partition.files:
            found.setdefault(entry.path, []).append(entry)
    return found


class Refusals:
    """The partitions of a topic refused on this node, with why. A refusal for records appended from outside
    (`repairable`) is lifted when the node reads lakelog's repair commit of the partition; any other, only by
    a restart."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.why: dict[int, str] = {}
        self.repairable: set[int] = set()  # refused only for records appended from outside

    def refuse(self, partition: int, why: str, repairable: bool = False) -> None:
        """The first reason stays, unless it was repairable and this one is not (a repair would not do)."""
        if partition in self.why and (repairable or partition not in self.repairable):
            return
        self.why[partition] = why
        if repairable:
            self.repairable.add(partition)
        else:
            self.repairable.discard(partition)
        log.warning("%s: %s. lakelog refuses to serve it", self._name(partition), why)

    def refused(self, partition: int) -> bool:
        return partition in self.why or EVERY_PARTITION in self.why

    def lift(self, partitions: Iterable[int], cause: str) -> None:
        """Lift the repairable refusals of `partitions`: `cause` (lakelog's repair commit) removed the records
        appended from outside. The partition is checked again at its next read or append."""
        for partition in partitions:
            if partition in self.repairable:
                self.repairable.discard(partition)
                del self.why[partition]
                log.warning("%s: refusal lifted: %s removed the records appended beyond its log end",
                            self._name(partition), cause)

    def error(self, partition: int) -> DataChangedOutside | None:
        why = self.why.get(partition, self.why.get(EVERY_PARTITION))
        if why is None:
            return None
        return DataChangedOutside(
            f"{self._name(partition)} was changed outside lakelog: {why}. lakelog refuses to serve it rather than "
            f"answer a duplicate offset or skip a record; {self._remedy(partition)}", self.topic, partition)

    def _remedy(self, partition: int) -> str:
        if partition in self.repairable and EVERY_PARTITION not in self.why:
            return f"run `lakelog topics repair {self.topic}` to remove the records appended beyond the log end"
        return "repair the table and restart lakelog"

    def check(self, partition: int) -> None:
        error = self.error(partition)
        if error is not None:
            raise error

    def _name(self, partition: int) -> str:
        return f"every partition of topic {self.topic!r}" if partition == EVERY_PARTITION else \
            f"partition {partition} of topic {self.topic!r}"


class OutsideWatch:
    """The checks of a snapshot load (see the module's docstring), for one topic log."""

    def __init__(self, topic: str, storage: Storage, table_uri: str,
                 read_entries: Callable[[DataFile], list[SegmentFile]]) -> None:
        self.refusals = Refusals(topic)
        self.storage = storage
        self.uri = table_uri
        self._read_entries = read_entries  # a file's entries by its content (file_slices.FileSlices.read)
        # Versions loaded past whose commits could not be read yet (a storage error): read at the next load.
        self._unchecked: tuple[int, dict[str, list[SegmentFile]]] | None = None

    def after_load(self, old: SegmentIndex, new: SegmentIndex, slices: Mapping[str, list[SegmentFile]],
                   old_version: int, new_version: int) -> None:
        """Called with the log's lock held once a load replaced index `old` (at `old_version`) by `new`."""
        for partition, index in new.partitions.items():
            before = old.partitions.get(partition)
            why = duplicated(index.files) or below_log_start(index.files, before.files if before else [])
            if why is not None:
                self.refusals.refuse(partition, why)
        known = entries_by_path(old)
        start = old_version + 1
        if self._unchecked is not None:
            start, earlier = self._unchecked
            known = {**known, **earlier}
        elif old_version < 0 or not _files_changed(known, new):
            return  # the first load, or only appends (lakelog's, or caught by the checks above and at reads)
        known.update(entries_by_path(new))
        known.update(slices)  # by content: the runs as read, not as joined in the index
        self._unchecked = None
        self._read_commits(range(start, new_version + 1), known)

    def _read_commits(self, versions: range, known: dict[str, list[SegmentFile]]) -> None:
        if len(versions) > COMMITS_READ_MAX:
            log.warning("%d commits of topic %s loaded at once: those of other writers are not checked",
                        len(versions), self.refusals.topic)
            return
        for version in versions:
            try:
                commit = parse_commit(version, self.storage.read_bytes(commit_uri(self.uri, version)))
                refused = refused_by(commit, lambda f: self._entries(f, known))
            except FileNotFoundError:
                log.warning("commit %d of topic %s was cleaned up before it was checked", version, self.refusals.topic)
                continue
            except STORAGE_ERRORS as exc:  # checked at the next load, from this version on
                log.warning("commits of topic %s not checked yet: %s", self.refusals.topic, exc)
                self._unchecked = (version, known)
                return
            if commit.repaired:
                self.refusals.lift(commit.repaired, f"lakelog's repair at version {version}")
            appended_only = commit.data_change and not commit.removed  # repaired, if beyond the log end
            for partition, why in refused.items():
                self.refusals.refuse(partition, why, repairable=appended_only and partition != EVERY_PARTITION)

    def _entries(self, file: DataFile, known: dict[str, list[SegmentFile]]) -> list[SegmentFile] | None:
        """A file's entries: known from the indexes before and after, else read (a file added and removed
        between two loads); None when it is gone or unreadable."""
        entries = known.get(file.path)
        if entries is None:
            try:
                entries = known[file.path] = self._read_entries(file)
            except (FileNotFoundError, pa.ArrowException) as exc:
                log.warning("file %s of topic %s not read: %s", file.path, self.refusals.topic, exc)
                return None
        return entries


def _files_changed(old: Mapping[str, list[SegmentFile]], new: SegmentIndex) -> bool:
    """Files left the index, or files by content came: only then may another writer have changed records
    otherwise than by appending (which the other checks find)."""
    paths = {entry.path for partition in new.partitions.values() for entry in partition.files}
    if any(path not in paths for path in old):
        return True
    return any(entry.by_content and entry.path not in old
               for partition in new.partitions.values() for entry in partition.files)
