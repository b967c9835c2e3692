"""Errors of the transaction coordinator, with Kafka's error names (the Kafka tier maps them to codes)."""

from __future__ import annotations

from lakelog.platform.errors import LakelogError


class ProducerFenced(LakelogError):
    """A producer's epoch is older than the transactional id's current one: a newer producer with the same
    `transactional.id` (or a timeout abort, which bumps the epoch) fenced it. Fatal for the producer."""

    code = "PRODUCER_FENCED"


class InvalidProducerEpoch(LakelogError):
    """An epoch that is not the current one where Kafka answers the older code (InitProducerId's expected
    producer, produce of a transactional batch)."""

    code = "INVALID_PRODUCER_EPOCH"


class InvalidProducerIdMapping(LakelogError):
    """The producer id is not the one the transactional id holds (or the id is unknown)."""

    code = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTxnState(LakelogError):
    """The call does not fit the transaction's state (commit after abort, a batch to a partition never added
    to the transaction: KIP-890's verification)."""

    code = "INVALID_TXN_STATE"


class ConcurrentTransactions(LakelogError):
    """The previous transaction is still being completed (its markers written): retry shortly."""

    code = "CONCURRENT_TRANSACTIONS"
    retriable = True


class InvalidTransactionTimeout(LakelogError):
    code = "INVALID_TRANSACTION_TIMEOUT"


class TransactionalIdNotFound(LakelogError):
    code = "TRANSACTIONAL_ID_NOT_FOUND"


class TransactionCoordinatorFenced(LakelogError):
    """Another node took the transactional id over while this one was writing its state."""

    code = "TRANSACTION_COORDINATOR_FENCED"


class TransactionsNotCompleted(LakelogError):
    """A piece of the transaction protocol this node cannot complete (answered, never a silent timeout)."""

    code = "COORDINATOR_NOT_AVAILABLE"
    retriable = True
