"""CLI failures on a bad root are one line naming the root and the cause; readers create no catalog."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import S3Endpoint, free_port

LAKELOG = [sys.executable, "-m", "lakelog.cli"]


def run(root: str, *args: str, storage: dict[str, str] | None = None,
        drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"LAKELOG_ROOT": root, "LAKELOG_STORAGE": json.dumps(storage or {})})
    return subprocess.run([*LAKELOG, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.s3
def test_missing_bucket_is_one_line(s3: S3Endpoint) -> None:
    done = run("s3://missing-bucket/x", "topics", "list", storage=s3.options)
    assert done.returncode == 1
    assert done.stderr == ("error: KAFKA_STORAGE_ERROR: cannot use root s3://missing-bucket/x: "
                           "bucket 'missing-bucket' does not exist\n")


def test_unreachable_endpoint_is_one_line() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    storage = {"aws_endpoint_url": endpoint, "aws_region": "us-east-1", "aws_access_key_id": "test",
               "aws_secret_access_key": "test", "max_retries": "0"}
    done = run("s3://bucket/x", "topics", "list", storage=storage)
    assert done.returncode == 1
    assert done.stderr == (f"error: KAFKA_STORAGE_ERROR: cannot use root s3://bucket/x: endpoint {endpoint} "
                           "is unreachable (connection refused)\n")


@pytest.mark.s3
def test_missing_credentials_is_one_line(s3: S3Endpoint) -> None:
    storage = {"aws_endpoint_url": s3.endpoint, "aws_region": "us-east-1"}
    done = run(s3.root(), "topics", "list", storage=storage,
               drop=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: KAFKA_STORAGE_ERROR: cannot use root s3://")
    assert done.stderr.rstrip().endswith(": no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                                         "(or aws_access_key_id/aws_secret_access_key in LAKELOG_STORAGE)")


def test_permission_denied_is_one_line(tmp_path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any folder")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0)
    done = run(str(locked / "root"), "topics", "list")
    assert done.returncode == 1
    assert done.stderr == f"error: KAFKA_STORAGE_ERROR: cannot use root {locked / 'root'}: permission denied\n"


@pytest.mark.s3
@pytest.mark.parametrize("command", [("topics", "list"), ("topics", "describe", "t"), ("consume", "t")])
def test_readers_do_not_create_a_catalog(s3: S3Endpoint, command: tuple[str, ...]) -> None:
    root = s3.root()
    done = run(root, *command, storage=s3.options)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"error: CATALOG_NOT_FOUND: {root} holds no lakelog catalog; "
                           "`lakelog topics create` or `lakelog serve` creates one\n")
    assert run(root, "topics", "list", storage=s3.options).returncode == 1  # still nothing created


@pytest.mark.s3
def test_topics_create_creates_the_catalog_and_says_so(s3: S3Endpoint) -> None:
    root = s3.root()
    created = run(root, "topics", "create", "t", storage=s3.options)
    assert created.returncode == 0, created.stderr
    assert created.stderr == f"created a lakelog catalog at {root}\n"
    second = run(root, "topics", "create", "u", storage=s3.options)
    assert second.stderr == ""
    listed = run(root, "topics", "list", storage=s3.options)
    assert (listed.returncode, listed.stderr) == (0, "")
    assert [json.loads(line)["name"] for line in listed.stdout.splitlines()] == ["t", "u"]


# moto with IAM checks on after the set-up calls: a bucket, and a user with no policy (so: access denied).
MOTO_WITH_AUTH = """
import json, os, sys
os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
from moto.server import ThreadedMotoServer
import boto3
port = int(sys.argv[1])
ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False).start()
kw = dict(endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1", aws_access_key_id="test",
          aws_secret_access_key="test")
boto3.client("s3", **kw).create_bucket(Bucket="locked")
boto3.client("iam", **kw).create_user(UserName="nobody")
key = boto3.client("iam", **kw).create_access_key(UserName="nobody")["AccessKey"]
print(json.dumps([key["AccessKeyId"], key["SecretAccessKey"]]), flush=True)
sys.stdin.read()
"""


@pytest.mark.s3
def test_s3_permission_denied_and_refused_credentials_are_one_line() -> None:
    port = free_port()
    moto = subprocess.Popen([sys.executable, "-c", MOTO_WITH_AUTH, str(port)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        key, secret = json.loads(moto.stdout.readline())  # type: ignore[union-attr]
        endpoint = {"aws_endpoint_url": f"http://127.0.0.1:{port}", "aws_region": "us-east-1"}
        denied = run("s3://locked/x", "topics", "list",
                     storage={**endpoint, "aws_access_key_id": key, "aws_secret_access_key": secret})
        assert (denied.returncode, denied.stderr) == (
            1, "error: KAFKA_STORAGE_ERROR: cannot use root s3://locked/x: permission denied\n")
        refused = run("s3://locked/x", "topics", "list",
                      storage={**endpoint, "aws_access_key_id": "unknown", "aws_secret_access_key": "unknown"})
        assert (refused.returncode, refused.stderr) == (
            1, "error: KAFKA_STORAGE_ERROR: cannot use root s3://locked/x: the credentials were refused "
               "(InvalidAccessKeyId or SignatureDoesNotMatch)\n")
    finally:
        moto.kill()
