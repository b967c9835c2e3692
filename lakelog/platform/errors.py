"""Errors of the log core, one type per Kafka error code.

Each carries Kafka's error name (`code`) and whether a client may retry. The
HTTP tier maps them to status codes in one place (`ingest_api/errors.py`); the
CLI prints `code: message`.
"""

from __future__ import annotations


class LakelogError(Exception):
    code: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidTopic(LakelogError):
    code = "INVALID_TOPIC_EXCEPTION"


class TopicAlreadyExists(LakelogError):
    code = "TOPIC_ALREADY_EXISTS"


class UnknownTopicOrPartition(LakelogError):
    code = "UNKNOWN_TOPIC_OR_PARTITION"


class InvalidPartitions(LakelogError):
    code = "INVALID_PARTITIONS"


class InvalidConfig(LakelogError):
    code = "INVALID_CONFIG"


class InvalidRecord(LakelogError):
    code = "INVALID_RECORD"


class RecordsRefused(InvalidRecord):
    """A produce call refused whole for some of its records (a typed topic's validation): `record_errors`
    are (index in the call, why), as Kafka's Produce answer lists them (KIP-467)."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.record_errors = record_errors




class InvalidTimestamp(InvalidRecord):
    code = "INVALID_TIMESTAMP"


class InvalidRequest(LakelogError):
    code = "INVALID_REQUEST"


class RecordTooLarge(LakelogError):
    code = "MESSAGE_TOO_LARGE"


class OffsetOutOfRange(LakelogError):
    code = "OFFSET_OUT_OF_RANGE"

    def __init__(self, message: str, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class OutOfOrderSequence(LakelogError):
    code = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class DuplicateSequence(LakelogError):
    code = "DUPLICATE_SEQUENCE_NUMBER"


class IdempotencyKeyReused(LakelogError):
    """An Idempotency-Key sent again with other records: the first request's answer does not fit them."""

    code = "IDEMPOTENCY_KEY_REUSED"


class InvalidProducerEpoch(LakelogError):
    """An older producer epoch: the producer was fenced by a newer instance."""

    code = "INVALID_PRODUCER_EPOCH"


class ProducerStateChanged(LakelogError):
    """Another writer of the topic committed batches of these producers since this node loaded their state:
    the writer re-checks its calls against the log before committing (never escapes a healthy flush)."""

    code = "CONCURRENT_TRANSACTIONS"
    retriable = True

    def __init__(self, message: str, producer_ids: set[int] | None) -> None:
        super().__init__(message)
        self.producer_ids = producer_ids  # None: any producer may have changed


class DataChangedOutside(LakelogError):
    """Another writer changed a partition's records outside lakelog (another Delta tool's append, delete,
    update, merge, overwrite or restore): lakelog refuses to serve or extend the partition rather than
    answer a duplicate offset or skip a record (platform/delta/outside_commits.py)."""

    code = "DATA_CHANGED_OUTSIDE_LAKELOG"

    def __init__(self, message: str, topic: str, partition: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition


class RequestTimedOut(LakelogError):
    code = "REQUEST_TIMED_OUT"
    retriable = True


class StorageUnavailable(LakelogError):
    code = "KAFKA_STORAGE_ERROR"
    retriable = True


class NotEnoughReplicas(LakelogError):
    code = "NOT_ENOUGH_REPLICAS"
    retriable = True


class CatalogMissing(LakelogError):
    """The root holds no lakelog catalog, and the caller only reads: nothing is created for it."""

    code = "CATALOG_NOT_FOUND"


class StorageWriteFailed(LakelogError):
    """Storage refused a write for a reason a retry cannot fix (a cast or schema error, a bad path)."""

    code = "KAFKA_STORAGE_ERROR"


class BrokerClosed(LakelogError):
    code = "BROKER_NOT_AVAILABLE"
    retriable = True


class OffsetsMoved(LakelogError):
    """Records whose offsets were fixed before their commit (the node journal's) found the log end elsewhere:
    never committed at other offsets (retriable: planned again against the log as it is now)."""

    code = "KAFKA_STORAGE_ERROR"
    retriable = True
