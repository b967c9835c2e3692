"""The catalog of topics: a Delta table of topic versions, the latest row per name wins.

Each change to a topic commits a row with `SetTransaction("lakelog.topic.<name>",
revision)`, so two nodes changing one topic at once conflict in delta-rs and
the loser re-reads and re-validates: no lost update, no double create.
"""

from __future__ import annotations

import errno
import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pyarrow as pa
from deltalake import write_deltalake
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import CommitProperties, Transaction

from lakelog.platform.backoff import backoff_s
from lakelog.platform.clock import now_ms, to_ms
from lakelog.platform.control_table import control_table_exists, latest_rows, open_control_table, reread_if_changed
from lakelog.platform.errors import (
    CatalogMissing,
    InvalidPartitions,
    InvalidRequest,
    InvalidTopic,
    StorageUnavailable,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from lakelog.platform.layout import CATALOG_TABLE, topic_path
from lakelog.platform.log import TopicLog
from lakelog.platform.storage import STORAGE_ERRORS, Storage, describe_storage_error
from lakelog.platform.topic_config import TopicConfig, parse_topic_config
from lakelog.schemas import CATALOG_SCHEMA

TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249
MAX_PARTITIONS = 10_000
# Re-read and re-validate this often when other nodes change the catalog, with a jittered wait between
# attempts (about 25 s at most): without it, a node slower than its peers lost every attempt.
CATALOG_CHANGE_ATTEMPTS = 60


@dataclass(frozen=True)
class TopicMeta:
    name: str
    partitions: int
    config: TopicConfig
    revision: int
    created_ms: int
    updated_ms: int


def validate_topic_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidTopic("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopic(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopic(f"topic name is {len(name)} characters; the limit is {MAX_TOPIC_NAME}")
    if not TOPIC_NAME.match(name):
        raise InvalidTopic(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")
    return name


def validate_partitions(partitions: Any) -> int:
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise InvalidPartitions(f"partitions must be an integer, got {partitions!r}")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidPartitions(f"partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}")
    return partitions


class Catalog:
    def __init__(self, storage: Storage, create: bool = True) -> None:
        """`create=False`: a root without a catalog raises `CatalogMissing` (readers create nothing).
        `created` tells whether this call created the catalog. Storage failures raise `StorageUnavailable`
        with one line naming the root and the cause."""
        self.storage = storage
        self._lock = threading.RLock()
        self._dt, self.created = _open_catalog(storage, create)
        self._topics: dict[str, TopicMeta] = {}
        self._version = -1
        self.refresh()

    def refresh(self) -> None:
        with self._lock:
            self._version, rows = reread_if_changed(self.storage, self._dt, self._version)
            if rows is not None:
                self._topics = _latest_topics(rows)

    # ---- reads ------------------------------------------------------------

    def list_topics(self) -> list[TopicMeta]:
        with self._lock:
            return sorted(self._topics.values(), key=lambda t: t.name)

    def get(self, name: str, refresh: bool = True) -> TopicMeta:
        with self._lock:
            meta = self._topics.get(name)
            if meta is None and refresh:
                self.refresh()
                meta = self._topics.get(name)
        if meta is None:
            raise UnknownTopicOrPartition(f"unknown topic {name!r}")
        return meta

    # ---- changes ----------------------------------------------------------

    def create_topic(self, name: str, partitions: int, config: Mapping[str, Any] | None = None,
                     create_table: Callable[[TopicConfig], None] | None = None) -> TopicMeta:
        """`create_table` creates the topic's table (default: under this catalog's root)."""
        validate_topic_name(name)
        validate_partitions(partitions)
        parsed = parse_topic_config(config)

        def change(current: TopicMeta | None, now: int) -> TopicMeta:
            if current is not None:
                raise TopicAlreadyExists(f"topic {name!r} already exists")
            if create_table is None:
                TopicLog.create_table(self.storage, name, file_delete_delay_ms=parsed.file_delete_delay_ms)
            else:
                create_table(parsed)
            return TopicMeta(name, partitions, parsed, 0, now, now)

        return self._change(name, change)

    def alter_config(self, name: str, changes: Mapping[str, Any]) -> TopicMeta:
        if not isinstance(changes, Mapping) or not changes:
            raise InvalidRequest("no config changes given")

        def change(current: TopicMeta | None, now: int) -> TopicMeta:
            meta = _existing(name, current)
            config = meta.config.altered(changes)
            if config.replication_factor != meta.config.replication_factor:
                raise InvalidRequest("replication.factor is set at creation and cannot be altered")
            return TopicMeta(name, meta.partitions, config, meta.revision, meta.created_ms, now)

        return self._change(name, change)

    def add_partitions(self, name: str, total: int) -> TopicMeta:
        validate_partitions(total)

        def change(current: TopicMeta | None, now: int) -> TopicMeta:
            meta = _existing(name, current)
            if total <= meta.partitions:
                raise InvalidPartitions(
                    f"topic {name!r} has {meta.partitions} partitions; the new count must be larger, got {total}"
                )
            return TopicMeta(name, total, meta.config, meta.revision, meta.created_ms, now)

        return self._change(name, change)

    def delete_topic(self, name: str) -> None:
        """Remove the topic from the catalog, then its table. A name that is gone from the catalog but
        whose table still holds data (a delete interrupted by a crash) has its deletion finished. Of
        concurrent deletes (any nodes) one wins; the others get UnknownTopicOrPartition."""
        validate_topic_name(name)  # a name like '..' would make the table's folder the root's (or beyond)
        uri = self.storage.uri(topic_path(name))
        seen: list[TopicMeta] = []

        def change(current: TopicMeta | None, now: int) -> TopicMeta | None:
            if current is not None:
                seen.append(current)
                return None
            if seen or not self.storage.list_names(uri) or TopicLog.table_is_empty(self.storage, name):
                # Deleted by another node since we looked (it removes the table); or nothing is left, or a
                # bare table a concurrent create may be reusing right now: it must stay.
                raise UnknownTopicOrPartition(f"unknown topic {name!r}")
            # A leftover of an interrupted delete: a tombstone again, so that a create of the name
            # committed meanwhile conflicts with it (and is deleted as asked, not wiped under its feet).
            seen.append(TopicMeta(name, 1, parse_topic_config(None), 0, now, now))
            return None

        self._change(name, change, tombstone=lambda: seen[-1])
        try:
            self.storage.delete_tree(uri)
        except FileNotFoundError:
            pass  # another node finishing the same delete
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise StorageUnavailable(f"topic {name!r} is deleted, but its table at {uri} is not yet "
                                         f"removed ({exc}); `lakelog topics delete {name}` finishes it") from None
            # A new topic of the name is being created in the folder: what is left of ours is unreferenced.

    def _change(self, name: str, change: Callable[[TopicMeta | None, int], TopicMeta | None],
                tombstone: Callable[[], TopicMeta] | None = None) -> Any:
        """Compare-and-set on the topic's row: read, validate and commit under this node's lock, and against
        other processes through `SetTransaction("lakelog.topic.<name>", revision)`: a concurrent change of
        the same topic makes the commit fail in delta-rs, and the change is validated again."""
        for attempt in range(CATALOG_CHANGE_ATTEMPTS):
            if attempt:
                time.sleep(backoff_s(attempt - 1))  # outside the lock: this node's other changes go on
            with self._lock:
                self.refresh()
                current = self._topics.get(name)
                revision = self._dt.transaction_version(f"lakelog.topic.{name}") or 0
                now = now_ms()
                updated = change(current, now)
                # A delete's row repeats the deleted topic's fields (`tombstone` when it is gone already).
                row = _row(name, updated, current or (tombstone() if tombstone else None), revision + 1, now)
                try:
                    write_deltalake(
                        self._dt, row, mode="append",
                        commit_properties=CommitProperties(
                            app_transactions=[Transaction(f"lakelog.topic.{name}", revision + 1)],
                            max_commit_retries=0,
                        ),
                    )
                except CommitFailedError:
                    continue  # another process changed the catalog: re-read, re-validate
                self.refresh()
                return self._topics.get(name)
        raise InvalidRequest(f"topic {name!r} is being changed concurrently; try again")


def _open_catalog(storage: Storage, create: bool) -> tuple[Any, bool]:
    try:
        exists = control_table_exists(storage, CATALOG_TABLE)
        if not exists and not create:
            raise CatalogMissing(f"{storage.root} holds no lakelog catalog; `lakelog topics create` or "
                                 "`lakelog serve` creates one")
        return open_control_table(storage, CATALOG_TABLE, CATALOG_SCHEMA), not exists
    except STORAGE_ERRORS as exc:
        raise StorageUnavailable(describe_storage_error(storage, exc)) from None


def _existing(name: str, current: TopicMeta | None) -> TopicMeta:
    if current is None:
        raise UnknownTopicOrPartition(f"unknown topic {name!r}")
    return current


def _row(name: str, meta: TopicMeta | None, current: TopicMeta | None, revision: int, now: int) -> pa.Table:
    source = meta or current
    assert source is not None
    return pa.Table.from_pylist(
        [{
            "name": name,
            "generation": revision,
            "partitions": source.partitions,
            "config": json.dumps(source.config.to_kafka()),
            "deleted": meta is None,
            "created": source.created_ms,
            "updated": now,
        }],
        schema=CATALOG_SCHEMA,
    )


def _latest_topics(table: pa.Table | None) -> dict[str, TopicMeta]:
    if table is None or table.num_rows == 0:
        return {}
    topics = {}
    for row in latest_rows(table, ["name"], ["generation"]).to_pylist():
        if row["deleted"]:
            continue
        name = row["name"]
        topics[name] = TopicMeta(
            name=name,
            partitions=row["partitions"],
            config=parse_topic_config(json.loads(row["config"])),
            revision=row["generation"],
            created_ms=to_ms(row["created"]),
            updated_ms=to_ms(row["updated"]),
        )
    return topics

