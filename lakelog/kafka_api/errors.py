"""Kafka's numeric error codes for lakelog's errors (which carry Kafka's error names), in one place."""

from __future__ import annotations

import logging

from lakelog.platform.errors import LakelogError

log = logging.getLogger(__name__)

NONE = 0
UNKNOWN_SERVER_ERROR = -1

# Kafka's protocol error codes (org.apache.kafka.common.protocol.Errors), by the names lakelog's errors use.
CODES: dict[str, int] = {
    "UNKNOWN_SERVER_ERROR": -1,
    "OFFSET_OUT_OF_RANGE": 1,
    "CORRUPT_MESSAGE": 2,
    "UNKNOWN_TOPIC_OR_PARTITION": 3,
    "LEADER_NOT_AVAILABLE": 5,
    "NOT_LEADER_OR_FOLLOWER": 6,
    "REQUEST_TIMED_OUT": 7,
    "BROKER_NOT_AVAILABLE": 8,
    "MESSAGE_TOO_LARGE": 10,
    "COORDINATOR_LOAD_IN_PROGRESS": 14,
    "COORDINATOR_NOT_AVAILABLE": 15,
    "NOT_COORDINATOR": 16,
    "INVALID_TOPIC_EXCEPTION": 17,
    "RECORD_LIST_TOO_LARGE": 18,
    "NOT_ENOUGH_REPLICAS": 19,
    "INVALID_REQUIRED_ACKS": 21,
    "ILLEGAL_GENERATION": 22,
    "INCONSISTENT_GROUP_PROTOCOL": 23,
    "INVALID_GROUP_ID": 24,
    "UNKNOWN_MEMBER_ID": 25,
    "INVALID_SESSION_TIMEOUT": 26,
    "REBALANCE_IN_PROGRESS": 27,
    "TOPIC_AUTHORIZATION_FAILED": 29,
    "GROUP_AUTHORIZATION_FAILED": 30,
    "CLUSTER_AUTHORIZATION_FAILED": 31,
    "INVALID_TIMESTAMP": 32,
    "UNSUPPORTED_SASL_MECHANISM": 33,
    "ILLEGAL_SASL_STATE": 34,
    "UNSUPPORTED_VERSION": 35,
    "TOPIC_ALREADY_EXISTS": 36,
    "INVALID_PARTITIONS": 37,
    "INVALID_REPLICATION_FACTOR": 38,
    "INVALID_CONFIG": 40,
    "INVALID_REQUEST": 42,
    "UNSUPPORTED_FOR_MESSAGE_FORMAT": 43,
    "POLICY_VIOLATION": 44,
    "OUT_OF_ORDER_SEQUENCE_NUMBER": 45,
    "DUPLICATE_SEQUENCE_NUMBER": 46,
    "INVALID_PRODUCER_EPOCH": 47,
    "INVALID_TXN_STATE": 48,
    "INVALID_PRODUCER_ID_MAPPING": 49,
    "INVALID_TRANSACTION_TIMEOUT": 50,
    "CONCURRENT_TRANSACTIONS": 51,
    "TRANSACTION_COORDINATOR_FENCED": 52,
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": 53,
    "SECURITY_DISABLED": 54,
    "KAFKA_STORAGE_ERROR": 56,
    "SASL_AUTHENTICATION_FAILED": 58,
    "UNKNOWN_PRODUCER_ID": 59,
    "NON_EMPTY_GROUP": 68,
    "GROUP_ID_NOT_FOUND": 69,
    "FETCH_SESSION_ID_NOT_FOUND": 70,
    "INVALID_FETCH_SESSION_EPOCH": 71,
    "FENCED_LEADER_EPOCH": 74,
    "UNSUPPORTED_COMPRESSION_TYPE": 76,
    "MEMBER_ID_REQUIRED": 79,
    "ELIGIBLE_LEADERS_NOT_AVAILABLE": 83,
    "FENCED_INSTANCE_ID": 82,
    "GROUP_SUBSCRIBED_TO_TOPIC": 86,
    "INVALID_RECORD": 87,
    "THROTTLING_QUOTA_EXCEEDED": 89,
    "PRODUCER_FENCED": 90,
    "UNKNOWN_TOPIC_ID": 100,
    "TRANSACTIONAL_ID_NOT_FOUND": 105,
    "FENCED_MEMBER_EPOCH": 110,
    "UNRELEASED_INSTANCE_ID": 111,
    "UNSUPPORTED_ASSIGNOR": 112,
    "STALE_MEMBER_EPOCH": 113,
    "UNSUPPORTED_ENDPOINT_TYPE": 115,
    "INVALID_RECORD_STATE": 121,
    "SHARE_SESSION_NOT_FOUND": 122,
    "INVALID_SHARE_SESSION_EPOCH": 123,
}
# lakelog errors without a Kafka counterpart of the same name.
ALIASES = {
    "IDEMPOTENCY_KEY_REUSED": "INVALID_REQUEST",
    "REPLICA_DIVERGED": "NOT_LEADER_OR_FOLLOWER",
    "CATALOG_NOT_FOUND": "KAFKA_STORAGE_ERROR",
    "DATA_CHANGED_OUTSIDE_LAKELOG": "KAFKA_STORAGE_ERROR",  # as Kafka answers for a log it took offline
}


class KafkaProtocolError(Exception):
    """A request lakelog cannot decode or does not serve: answered with `code` where the API allows."""

    def __init__(self, message: str, code: int = CODES["INVALID_REQUEST"]) -> None:
        super().__init__(message)
        self.code = code


def code_of(name: str) -> int:
    return CODES.get(ALIASES.get(name, name), UNKNOWN_SERVER_ERROR)


def error_code(exc: BaseException) -> int:
    """The Kafka error code a client should see for `exc`; unexpected errors are logged once here."""
    if isinstance(exc, LakelogError):
        return code_of(exc.code)
    if isinstance(exc, KafkaProtocolError):
        return exc.code
    log.error("unexpected error answering a Kafka request", exc_info=exc)
    return UNKNOWN_SERVER_ERROR


def error_message(exc: BaseException) -> str:
    if isinstance(exc, (LakelogError, KafkaProtocolError)):
        return str(exc)
    return "internal error (see the server's log)"
