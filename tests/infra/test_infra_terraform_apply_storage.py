"""The applied stack's bucket (tf_stack.py: infra/terraform applied to a local AWS endpoint): encrypted,
private, TLS only, and incomplete multipart uploads aborted."""

from __future__ import annotations

import json

import pytest
from tf_stack import as_list, policy_statements

pytestmark = [pytest.mark.s3, pytest.mark.timeout(900)]


def test_bucket_is_encrypted_private_and_tls_only(stack):
    s3 = stack.client("s3")
    bucket = stack.outputs["bucket"]

    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"

    block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert block == {"BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True}

    assert s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]

    policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    tls = [s for s in policy_statements(policy) if s["Effect"] == "Deny" and s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"]
    assert len(tls) == 1, policy
    assert set(as_list(tls[0]["Resource"])) == {f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"}
    assert tls[0]["Action"] == "s3:*" and tls[0]["Principal"] in ("*", {"AWS": "*"})
    # The policy only denies; access is granted by the roles' own policies.
    assert all(s["Effect"] == "Deny" for s in policy_statements(policy))


def test_bucket_lifecycle_aborts_incomplete_multipart_uploads(stack):
    rules = stack.client("s3").get_bucket_lifecycle_configuration(Bucket=stack.outputs["bucket"])["Rules"]
    abort = [r for r in rules if "AbortIncompleteMultipartUpload" in r]
    assert abort and abort[0]["Status"] == "Enabled"
    assert abort[0]["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] == 1
    assert abort[0]["Filter"] in ({}, {"Prefix": ""}), "applies to the whole bucket"
