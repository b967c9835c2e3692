"""Transactional batches kept outside the topic tables until their transaction ends:
`<root>/_transactions/staged/<topic>/<partition>/<producer id>/<transaction number>/<sequence>.<count>.parquet`.

TxnOffsetCommit's offsets taken by a node that does not coordinate the transactional id (the group's
coordinator, where clients send them) wait in `<root>/_transactions/offsets/<producer id>/<number>/<group>.json`
until the transaction's coordinator completes it. A group id may hold any character and be of any length
(`group_file_name`): one of [a-zA-Z0-9._-] up to 249 characters is the file's name as it is, any other is
named by its digest.

A batch is staged before its offsets are reserved (log/reservations.py), so every reservation has its
records here; a retried batch writes the same object again. The name carries the record count, so an
abort needs no read. Any node can complete any transaction from these objects.
"""

from __future__ import annotations

import hashlib
import io
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq

from lakelog.platform.layout import TRANSACTION_OFFSETS_STAGING as OFFSET_STAGING
from lakelog.platform.layout import TRANSACTION_STAGING
from lakelog.platform.log.reservations import StagedBatch
from lakelog.platform.storage import Storage
from lakelog.platform.transactions.state import PendingOffset
from lakelog.schemas import TOPIC_FILE_SCHEMA

PLAIN_GROUP = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # the ids lakelog took before any id was allowed


def group_file_name(group: str) -> str:
    """The name of a group's staged offsets: a plain id as it is (where it always was), any other id by its
    SHA-256 behind a `~`, which no plain id holds: any character is safe in a file or object name, and a name
    is never longer than a file system takes (255 bytes)."""
    if PLAIN_GROUP.fullmatch(group):
        return f"{group}.json"
    return f"~{hashlib.sha256(group.encode('utf-8', 'surrogatepass')).hexdigest()}.json"


class Staging:
    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def _folder(self, topic: str, partition: int, producer_id: int, number: int) -> str:
        return self._storage.uri(TRANSACTION_STAGING, topic, str(partition), str(producer_id), str(number))

    def stage(self, topic: str, partition: int, producer_id: int, number: int, sequence: int,
              records: pa.Table) -> None:
        """Write a batch's records (TOPIC_FILE_SCHEMA; their offsets are assigned when they are filled in)."""
        folder = self._folder(topic, partition, producer_id, number)
        self._storage.makedirs(folder)
        sink = io.BytesIO()
        pq.write_table(records.select(TOPIC_FILE_SCHEMA.names), sink, compression="snappy")
        self._storage.write_bytes(f"{folder}/{sequence}.{records.num_rows}.parquet", sink.getvalue())

    def unstage(self, topic: str, partition: int, producer_id: int, number: int, sequence: int, count: int) -> None:
        """A batch refused after it was staged (its transaction ended): never filled, so never left behind."""
        folder = self._folder(topic, partition, producer_id, number)
        self._storage.delete_files([f"{folder}/{sequence}.{count}.parquet"])

    def batches(self, topic: str, partition: int, producer_id: int, number: int,
                commit: bool) -> list[StagedBatch]:
        """The staged batches of a transaction in a partition, with their records' loader on commit."""
        folder = self._folder(topic, partition, producer_id, number)
        found = []
        for name in self._storage.list_names(folder):
            parts = name.split(".")
            if len(parts) != 3 or parts[2] != "parquet":
                continue  # a temporary file of a write in progress
            uri = f"{folder}/{name}"
            load = (lambda uri=uri: self._read(uri)) if commit else None
            found.append(StagedBatch(int(parts[0]), int(parts[1]), load))
        return sorted(found, key=lambda b: b.sequence)

    def _read(self, uri: str) -> pa.Table:
        table = pq.read_table(pa.BufferReader(self._storage.read_bytes(uri)))
        return table.cast(TOPIC_FILE_SCHEMA)

    def discard(self, topic: str, partition: int, producer_id: int, number: int) -> None:
        self._storage.delete_tree(self._folder(topic, partition, producer_id, number))

    def _offsets_uri(self, producer_id: int, number: int, group: str) -> str:
        return self._storage.uri(OFFSET_STAGING, str(producer_id), str(number), group_file_name(group))

    def stage_offsets(self, producer_id: int, number: int, group: str, offsets: list[PendingOffset]) -> None:
        """Add a group's offsets to those staged for the transaction (the latest per partition wins)."""
        uri = self._offsets_uri(producer_id, number, group)
        staged = {(o.topic, o.partition): o for o in self._read_offsets(uri, group)}
        staged.update({(o.topic, o.partition): o for o in offsets})
        self._storage.makedirs(uri.rsplit("/", 1)[0])
        self._storage.write_bytes(uri, json.dumps([[o.topic, o.partition, o.offset, o.metadata]
                                                   for o in staged.values()]).encode())

    def staged_offsets(self, producer_id: int, number: int, groups: frozenset[str]) -> list[PendingOffset]:
        return [o for group in sorted(groups)
                for o in self._read_offsets(self._offsets_uri(producer_id, number, group), group)]

    def _read_offsets(self, uri: str, group: str) -> list[PendingOffset]:
        try:
            rows = json.loads(self._storage.read_bytes(uri))
        except FileNotFoundError:
            return []
        return [PendingOffset(group, t, int(p), int(o), m) for t, p, o, m in rows]

    def discard_offsets(self, producer_id: int, number: int) -> None:
        self._storage.delete_tree(self._storage.uri(OFFSET_STAGING, str(producer_id), str(number)))
