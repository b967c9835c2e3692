"""storage.is_retriable: which storage errors pass by themselves."""

from __future__ import annotations

import pytest
from botocore.exceptions import EndpointConnectionError
from deltalake.exceptions import CommitFailedError, DeltaError, SchemaMismatchError, TableNotFoundError

from lakelog.platform.storage import is_retriable


@pytest.mark.parametrize("error", [
    OSError("connection reset"), TimeoutError("timed out"), ConnectionRefusedError(),
    DeltaError("Failed to read delta log object: Generic S3 error: error sending request"),
    DeltaError("Generic DeltaTable error: Object store error: service unavailable"),
    EndpointConnectionError(endpoint_url="http://127.0.0.1:1/bucket"),  # s3fs lets it through untranslated
])
def test_retriable(error: BaseException) -> None:
    assert is_retriable(error)


@pytest.mark.parametrize("error", [
    DeltaError("Generic DeltaTable error: Arrow error: Cast error: Failed to convert into Arrow schema"),
    DeltaError("Schema error: Invalid data type for Delta Lake"),
    SchemaMismatchError("Cannot cast schema"), TableNotFoundError("no log files"),
    PermissionError("denied"), NotADirectoryError("root is a file"), ValueError("a bug"),
])
def test_not_retriable(error: BaseException) -> None:
    assert not is_retriable(error)


def test_a_commit_conflict_is_retried_by_its_own_path() -> None:
    assert issubclass(CommitFailedError, DeltaError)  # log.append catches it before asking is_retriable
