"""The index entries of the files a topic's statistics cannot index alone, by path, and their cache.

Two kinds of files need more than their Delta statistics: files holding several partitions (layout 2's
flushes: their slices come from the commit or the footer, segment.py) and files another tool wrote
(delta-rs or Spark OPTIMIZE, Z-ORDER: indexed by their content, content_index.py). Their entries are known
for this node's own files, read (in parallel on object storage) for other writers' and after a restart,
and saved beside the log at each checkpoint (`TOPIC_SLICES_CACHE`), so a reopening node makes one GET
instead of a read per file. Files never change, so an entry cached for a path stays right.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from lakelog.platform.layout import TOPIC_SLICES_CACHE
from lakelog.platform.segments.content_index import DataFile, files_needing_slices, index_by_content
from lakelog.platform.segments.index import SegmentFile, SlicesCache, slices_from_table
from lakelog.platform.segments.segment import read_footer, slices_of
from lakelog.platform.storage import STORAGE_ERRORS, UPLOAD_CONNECTIONS, Storage

log = logging.getLogger(__name__)

# Footers (and content columns) of files another writer's commit or a restart adds.
_FILE_READS = ThreadPoolExecutor(max_workers=UPLOAD_CONNECTIONS, thread_name_prefix="lakelog-footer-get")

Remember = Callable[[str, pq.FileMetaData], None]  # the log's footer cache: the reads that follow need no GET


class FileSlices:
    def __init__(self, storage: Storage, table_uri: str, topic: str, lock: threading.RLock,
                 remember: Remember) -> None:
        self.storage = storage
        self.uri = table_uri
        self.topic = topic
        self._lock = lock  # the log's: entries are added and forgotten under it
        self._remember = remember
        # The entries of each such file, complete once there: never changed, only replaced or forgotten.
        self.by_path: dict[str, list[SegmentFile]] = {}
        self._cache_read = False
        self._cache = SlicesCache()  # the rows last saved: each save converts only what is new

    def of_snapshot(self, actions: pa.Table) -> dict[str, list[SegmentFile]]:
        """The entries of the snapshot's files that need them (`get_add_actions(flatten=True)`); the files
        it no longer holds are forgotten. Called with the log's lock held."""
        files = {f.path: f for f in files_needing_slices(actions)}
        missing = [f for path, f in files.items() if path not in self.by_path]
        if missing and not self._cache_read:
            self._cache_read = True
            cached = self._load()
            self.by_path.update((f.path, cached[f.path]) for f in missing if f.path in cached)
            missing = [f for f in missing if f.path not in self.by_path]
        if missing:
            reads = map(self.read, missing) if self.storage.is_local else _FILE_READS.map(self.read, missing)
            self.by_path.update(zip((f.path for f in missing), reads))
        for path in [path for path in self.by_path if path not in files]:
            del self.by_path[path]  # rolled or rewritten away
        return self.by_path

    def read(self, file: DataFile) -> list[SegmentFile]:
        """One file's entries: from the footer's slices when lakelog wrote them; else from its content. Needs
        no lock (a commit being followed is read outside it); the caller adds them to `by_path`."""
        footer = None
        if file.several:
            footer = read_footer(self.storage, f"{self.uri}/{file.path}")
            self._remember(file.path, footer)
            found = slices_of(file.path, file.modification_time_ms, footer)
            if found is not None:
                return found
        entries, footer = index_by_content(self.storage, self.uri, file, footer)
        self._remember(file.path, footer)
        log.info("indexed %s of topic %s by its content (a file another writer made): %d runs", file.path,
                 self.topic, len(entries))
        return entries

    def _load(self) -> dict[str, list[SegmentFile]]:
        """The entries cached at the last checkpoint (one GET instead of a read per file)."""
        try:
            table = pq.read_table(pa.BufferReader(self.storage.read_bytes(f"{self.uri}/{TOPIC_SLICES_CACHE}")))
        except FileNotFoundError:
            return {}
        except (*STORAGE_ERRORS, pa.ArrowException) as exc:
            log.warning("slices cache of %s not read (footers are read instead): %s", self.topic, exc)
            return {}
        if "by_content" not in table.column_names:
            # Written before files were indexed by content: it may hold another tool's file sliced by its
            # row-group statistics (the entries that hid records). Read again, once.
            return {}
        try:
            return slices_from_table(table)
        except (pa.ArrowException, KeyError) as exc:
            log.warning("slices cache of %s not read (footers are read instead): %s", self.topic, exc)
            return {}

    def save(self) -> None:
        """Off the produce path, at each checkpoint: the entries known now."""
        with self._lock:
            known = dict(self.by_path)
        if not known:
            return
        sink = pa.BufferOutputStream()
        pq.write_table(self._cache.rows(known), sink, compression="snappy")
        try:
            self.storage.write_bytes(f"{self.uri}/{TOPIC_SLICES_CACHE}", sink.getvalue())
        except STORAGE_ERRORS as exc:
            log.warning("slices cache of %s not written: %s", self.topic, exc)
