"""The journal's errors (mapped to HTTP and Kafka codes by their `code`, as every `LakelogError`)."""

from __future__ import annotations

from lakelog.platform.errors import LakelogError


class JournalFenced(LakelogError):
    """This node's journal generation was fenced (or its slot given up on): the calls of that flush were not
    acknowledged; a retry goes into the node's next generation."""

    code = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


class JournalCorrupt(LakelogError):
    """A journal object that is not one this code wrote (or a newer format): never replayed by guess."""

    code = "CORRUPT_MESSAGE"


class JournalRefused(LakelogError):
    """The journal was asked to run where it cannot (a store that does not honour create-only writes)."""

    code = "INVALID_CONFIG"


class JournalReplayFailed(LakelogError):
    """An uncommitted journal entry could not be placed at its offsets (a gap or another writer's records
    there): the node refuses to start rather than lose or move acknowledged records."""

    code = "KAFKA_STORAGE_ERROR"
