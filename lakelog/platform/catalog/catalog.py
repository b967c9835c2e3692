"""The catalog of topics: a Delta table of topic versions, the latest row per name wins.

Held in memory by each node (catalog/table.py): list and describe read no storage. Each change commits the
next version with put-if-absent, so of two nodes changing the catalog at once one wins and the other reads
the new version and validates again: no lost update, no double create.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

import pyarrow as pa
from deltalake.transaction import Transaction

from lakelog.platform.backoff import backoff_s
from lakelog.platform.catalog.table import CatalogTable
from lakelog.platform.catalog.topic_config import TopicConfig, deprecated_settings, parse_topic_config
from lakelog.platform.clock import now_ms, to_ms
from lakelog.platform.delta.delta_log import DELTA_LOG
from lakelog.platform.errors import (
    InvalidPartitions,
    InvalidRequest,
    InvalidTopic,
    LakelogError,
    StorageUnavailable,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from lakelog.platform.layout import topic_path
from lakelog.platform.log import TopicLog
from lakelog.platform.storage import STORAGE_ERRORS, Storage, describe_storage_error
from lakelog.schemas import CATALOG_SCHEMA

log = logging.getLogger(__name__)
T = TypeVar("T")
U = TypeVar("U")
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

    @property
    def topic_id(self) -> uuid.UUID:
        """Kafka's topic id (KIP-516): one per incarnation of the name, so a client tells a topic deleted and
        created again from the one it knew (librdkafka then takes the new partition count); derived from the
        name and the creation time, so every node answers the same without storing it."""
        return uuid.UUID(bytes=hashlib.sha256(f"{self.name}\0{self.created_ms}".encode()).digest()[:16])


def replaced(opened: TopicMeta, known: TopicMeta | None) -> bool:
    """Whether a table opened for the topic `opened` is no longer the topic's, by the catalog's view `known`:
    the topic was deleted, or deleted and created again (a new creation time). The name alone never says."""
    return known is None or known.created_ms != opened.created_ms


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


def missing_topic(name: Any) -> LakelogError:
    """The error for a name no topic has: InvalidTopic for a name no topic can have (Kafka's
    INVALID_TOPIC_EXCEPTION, which a client takes as final), else UnknownTopicOrPartition."""
    try:
        validate_topic_name(name)
    except InvalidTopic as exc:
        return exc
    return UnknownTopicOrPartition(f"unknown topic {name!r}")


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
        self._table = CatalogTable(storage, create)
        self.created = self._table.created
        self._topics: dict[str, TopicMeta] = {}
        self._rebuild()

    def close(self) -> None:
        """Wait for the catalog's background work (a snapshot being written)."""
        self._table.close()

    @property
    def version(self) -> int:
        """The catalog table's version this node's view is current at."""
        return self._table.version

    def refresh(self) -> None:
        """Read what other nodes committed since: one GET when nothing is new."""
        self._caught_up()

    def _caught_up(self) -> bool:
        """Refresh; True when anything was new."""
        with self._lock:
            try:
                changed = self._table.catch_up()
            except STORAGE_ERRORS as exc:
                raise StorageUnavailable(describe_storage_error(self.storage, exc)) from None
            if changed:
                self._rebuild()
            return changed

    def _rebuild(self) -> None:
        """The topics of the rows changed since the last rebuild (all of them after a reload)."""
        names = self._table.take_changed()
        if names is None:
            self._topics = {name: _meta(row) for name, row in self._table.rows.items() if not row["deleted"]}
            return
        for name in names:
            row = self._table.rows[name]
            if row["deleted"]:
                self._topics.pop(name, None)
            else:
                self._topics[name] = _meta(row)

    # ---- reads ------------------------------------------------------------

    def list_topics(self) -> list[TopicMeta]:
        with self._lock:
            return sorted(self._topics.values(), key=lambda t: t.name)

    def known(self, name: str) -> TopicMeta | None:
        """This node's view of a topic as of the last change or refresh applied, without the lock (a change
        or refresh holds it over storage I/O): for checks on every produce (the dict is replaced or changed
        whole, one entry at a time)."""
        return self._topics.get(name)

    def get(self, name: str, refresh: bool = True) -> TopicMeta:
        with self._lock:
            meta = self._topics.get(name)
            if meta is not None:
                return meta
            missing = missing_topic(name)
            if refresh and isinstance(missing, UnknownTopicOrPartition):  # an illegal name is in no catalog
                self.refresh()
                meta = self._topics.get(name)
        if meta is None:
            raise missing
        return meta

    # ---- changes ----------------------------------------------------------

    def create_topic(self, name: str, partitions: int, config: Mapping[str, Any] | None = None,
                     create_table: Callable[[TopicConfig], None] | None = None) -> TopicMeta:
        """`create_table` creates the topic's table (default: under this catalog's root); it runs beside the
        write of the catalog's row, before the catalog commit that makes the topic visible."""
        validate_topic_name(name)
        validate_partitions(partitions)
        parsed = parse_topic_config(config)

        def make_table() -> Callable[[], None] | None:
            if create_table is not None:
                create_table(parsed)
                return None
            # Its checkpoint is written beside the catalog commit.
            return TopicLog.create_version_0(self.storage, name, file_delete_delay_ms=parsed.file_delete_delay_ms)

        def change(current: TopicMeta | None, now: int) -> TopicMeta:
            if current is not None:
                raise TopicAlreadyExists(f"topic {name!r} already exists")
            return TopicMeta(name, partitions, parsed, 0, now, now)

        created = self._change(name, change, alongside=make_table)
        _log_deprecated(name, created.config)
        return created

    def alter_config(self, name: str, changes: Mapping[str, Any]) -> TopicMeta:
        if not isinstance(changes, Mapping) or not changes:
            raise InvalidRequest("no config changes given")

        before: list[TopicConfig] = []  # the config the change was made to (the last attempt's)

        def change(current: TopicMeta | None, now: int) -> TopicMeta:
            meta = _existing(name, current)
            config = meta.config.altered(changes)
            if config.replication_factor != meta.config.replication_factor:
                raise InvalidRequest("replication.factor is set at creation and cannot be altered")
            before[:] = [meta.config]
            return TopicMeta(name, meta.partitions, config, meta.revision, meta.created_ms, now)

        altered = self._change(name, change)
        _log_deprecated(name, altered.config, before[0] if before else None)
        return altered

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
        listed: list[list[str]] = []

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

        def seal_and_list() -> None:  # beside the write of the catalog row
            if self.storage.is_local:
                TopicLog.seal_for_delete(self.storage, name, self.storage.list_names(f"{uri}/{DELTA_LOG}"))
                return None
            files = self.storage.list_tree(uri)  # on S3 the files to delete are listed before the tombstone
            log_names = [f.rsplit("/", 1)[-1] for f in files if f.startswith(f"{uri}/{DELTA_LOG}/")]
            seal = TopicLog.seal_for_delete(self.storage, name, log_names)
            listed.append(files + ([seal] if seal else []))
            return None

        self._change(name, change, tombstone=lambda: seen[-1], alongside=seal_and_list)
        try:
            if listed:
                self.storage.delete_files(listed[-1])
            else:
                self.storage.delete_tree(uri)
        except FileNotFoundError:
            pass  # another node finishing the same delete
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise StorageUnavailable(f"topic {name!r} is deleted, but its table at {uri} is not yet "
                                         f"removed ({exc}); `lakelog topics delete {name}` finishes it") from None
            # A new topic of the name is being created in the folder: what is left of ours is unreferenced.

    def _change(self, name: str, change: Callable[[TopicMeta | None, int], TopicMeta | None],
                tombstone: Callable[[], TopicMeta] | None = None,
                alongside: Callable[[], Callable[[], None] | None] | None = None) -> Any:
        """Compare-and-set on the catalog: validate against this node's view, then commit the next version
        with put-if-absent (catalog/table.py). A version another node took first means the view was behind:
        catch up, validate again. No read precedes a commit: a change is two requests (the row's file, the
        commit file), with `alongside` (a create's table, a delete's listing) beside the first, and what it
        answers (a new table's checkpoint) beside the second. The commit carries the topic's revision as
        `SetTransaction("lakelog.topic.<name>", revision)`, for readers of the table."""
        for attempt in range(CATALOG_CHANGE_ATTEMPTS):
            if attempt:
                time.sleep(backoff_s(attempt - 1))  # outside the lock: this node's other changes go on
            with self._lock:
                if attempt:
                    self.refresh()
                now = now_ms()
                try:
                    updated = change(self._topics.get(name), now)
                except LakelogError:
                    # A refusal is decided on the latest view only: this node may not have seen a change yet.
                    if not self._caught_up():
                        raise
                    updated = change(self._topics.get(name), now)
                current = self._topics.get(name)
                known = self._table.rows.get(name)
                revision = known["generation"] if known is not None else 0
                # A delete's row repeats the deleted topic's fields (`tombstone` when it is gone already).
                row = _row(name, updated, current or (tombstone() if tombstone else None), revision + 1, now)
                txns = [Transaction(f"lakelog.topic.{name}", revision + 1)]
                try:
                    then, add = _beside(alongside, functools.partial(self._table.write_data, row))
                    _, landed = _beside(then, functools.partial(self._table.commit, add, row, txns))
                except LakelogError:  # `alongside` refused (a former table in the way): on the latest view?
                    if self._caught_up():
                        continue
                    raise
                except STORAGE_ERRORS as exc:
                    raise StorageUnavailable(describe_storage_error(self.storage, exc)) from None
                if not landed:
                    continue  # another node changed the catalog first: validate again on the new view
                self._rebuild()
                return self._topics.get(name)
        raise InvalidRequest(f"topic {name!r} is being changed concurrently; try again")


def _beside(first: Callable[[], U] | None, second: Callable[[], T]) -> tuple[U | None, T]:
    """Run `first` on another thread while `second` runs here (two requests in one round trip): both
    results; `first`'s error, if any, wins."""
    if first is None:
        return None, second()
    done: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(first())
        except BaseException as exc:  # re-raised on the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="lakelog-catalog-beside", daemon=True)
    thread.start()
    try:
        result = second()
    finally:
        thread.join()
    if failed:
        raise failed[0]
    return done[0], result


def _log_deprecated(name: str, config: TopicConfig, before: TopicConfig | None = None) -> None:
    for setting in deprecated_settings(config, before):  # Kafka warns of them too
        log.warning("topic %s: config %s", name, setting)


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


@functools.lru_cache(maxsize=1024)
def _config(text: str) -> TopicConfig:
    """Topics mostly share a few configs: each is parsed once (10,000 topics load in a fraction of a second)."""
    return parse_topic_config(json.loads(text))


def _meta(row: Mapping[str, Any]) -> TopicMeta:
    return TopicMeta(
        name=row["name"],
        partitions=row["partitions"],
        config=_config(row["config"]),
        revision=row["generation"],
        created_ms=to_ms(row["created"]),
        updated_ms=to_ms(row["updated"]),
    )
