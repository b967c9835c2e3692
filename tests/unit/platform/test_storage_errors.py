"""storage.is_retriable: which storage errors pass by themselves; obstore's errors and options as lakelog
names them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from botocore.exceptions import EndpointConnectionError
from deltalake.exceptions import CommitFailedError, DeltaError, SchemaMismatchError, TableNotFoundError
from obstore.exceptions import (
    AlreadyExistsError,
    GenericError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from obstore.store import S3Store

from lakelog.platform.storage import STORAGE_ERRORS, Storage, _object_errors, _obstore_kwargs, is_retriable


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


@pytest.mark.parametrize(("raised", "seen", "retriable"), [
    (GenericError("Generic S3 error: error sending request"), OSError, True),
    (PermissionDeniedError("403 Forbidden"), PermissionError, False),
    (UnauthenticatedError("InvalidAccessKeyId"), PermissionError, False),
    (NotFoundError("404 Not Found"), FileNotFoundError, True),
    (AlreadyExistsError("412 Precondition Failed"), FileExistsError, True),
])
def test_obstore_errors_are_the_os_errors_lakelog_handles(raised: Exception, seen: type, retriable: bool) -> None:
    with pytest.raises(seen) as caught:
        with _object_errors():
            raise raised
    assert isinstance(caught.value, STORAGE_ERRORS) and is_retriable(caught.value) is retriable
    assert caught.value.__cause__ is raised


def test_storage_options_reach_obstore_under_its_names() -> None:
    options = Storage.open("s3://bucket/root", {"endpoint_url": "http://127.0.0.1:9000", "region": "eu-west-1",
                                                "aws_access_key_id": "k", "aws_secret_access_key": "s",
                                                "timeout": "500ms", "max_retries": "5"}).options
    kwargs = _obstore_kwargs(options)
    assert kwargs["config"] == {"aws_endpoint": "http://127.0.0.1:9000", "aws_region": "eu-west-1",
                                "aws_access_key_id": "k", "aws_secret_access_key": "s"}
    assert kwargs["client_options"] == {"allow_http": True, "timeout": timedelta(milliseconds=500)}
    assert kwargs["retry_config"]["max_retries"] == 5
    S3Store("bucket", **kwargs)  # obstore refuses a key it does not know
