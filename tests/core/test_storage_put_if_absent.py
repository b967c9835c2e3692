"""Storage.put_if_absent, the primitive the Delta commits use today and the node journal's fencing would
(docs/architecture.md, "The node journal"): of racing creates of one key exactly one wins and the object
is the winner's, on a local folder and on S3 (moto's server, which honours `If-None-Match: *`)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from lakelog.platform.storage import Storage

RACERS = 8


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return Storage.open(str(tmp_path / "root"))
    s3 = request.getfixturevalue("s3")
    return Storage.open(s3.root(), s3.options)


def test_a_taken_key_is_refused_and_keeps_its_bytes(storage: Storage) -> None:
    uri = storage.uri("_journal", "gens", "n1", "run", "00000000000000000000")
    assert storage.put_if_absent(uri, b"journal object")
    assert not storage.put_if_absent(uri, b"fence")
    assert storage.read_bytes(uri) == b"journal object"


def test_of_racing_creates_exactly_one_wins(storage: Storage) -> None:
    uri = storage.uri("_journal", "gens", "n1", "run", "00000000000000000001")
    barrier = threading.Barrier(RACERS)
    won: list[bytes] = []

    def race(body: bytes) -> None:
        barrier.wait()
        if storage.put_if_absent(uri, body):
            won.append(body)

    threads = [threading.Thread(target=race, args=(f"writer {i}".encode(),)) for i in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    assert storage.read_bytes(uri) == won[0]


def test_a_deleted_key_is_free_again(storage: Storage) -> None:
    """Why a journal generation's last object becomes a tombstone and fences are never deleted."""
    uri = storage.uri("_journal", "gens", "n1", "run", "00000000000000000002")
    assert storage.put_if_absent(uri, b"first")
    storage.delete_files([uri])
    assert storage.put_if_absent(uri, b"second")
    assert storage.read_bytes(uri) == b"second"


@pytest.mark.s3
def test_moto_answers_if_none_match_with_412(s3) -> None:  # type: ignore[no-untyped-def]
    """The endpoint itself refuses (not a client-side check): botocore sends the header as given."""
    client = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test")
    key = f"{s3.root().split('/', 3)[3]}/probe"
    client.put_object(Bucket=s3.bucket, Key=key, Body=b"a", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket=s3.bucket, Key=key, Body=b"b", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=s3.bucket, Key=key)["Body"].read() == b"a"


@pytest.mark.parametrize("swept", ["before the link", "after the link"])
def test_a_folder_removed_under_a_local_put_is_made_again(tmp_path: Path, monkeypatch, swept: str) -> None:
    # Another node's topic delete removes the table's folder (shutil.rmtree) while this node writes version 0
    # of the topic's new table into it: before the link nothing of ours is in place, so the put starts
    # again; after it, the folder sweep took only the temporary file, and the put has landed.
    storage = Storage.open(str(tmp_path / "root"))
    uri = storage.uri("topics", "x", "_delta_log", "00000000000000000000.json")
    link = os.link
    sweeps: list[str] = []

    def link_amid_a_sweep(temporary: str, target: str) -> None:
        if not sweeps:
            sweeps.append(temporary)
            if swept == "before the link":
                shutil.rmtree(os.path.dirname(target))
            else:
                link(temporary, target)
                os.unlink(temporary)
                return
        link(temporary, target)

    monkeypatch.setattr("lakelog.platform.storage.os.link", link_amid_a_sweep)
    assert storage.put_if_absent(uri, b"version 0")
    assert storage.read_bytes(uri) == b"version 0"
    assert os.listdir(os.path.dirname(uri)) == ["00000000000000000000.json"]  # no temporary left
