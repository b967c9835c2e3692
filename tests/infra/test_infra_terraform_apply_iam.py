"""The applied stack's IAM roles (tf_stack.py: infra/terraform applied to a local AWS endpoint): the task
role limited to the root prefix, no wildcard action or resource in any role, and the Spark job role reading
the artifacts and writing only the root and the logs."""

from __future__ import annotations

import pytest
from tf_stack import (
    ARTIFACTS_PREFIX,
    ROOT_PREFIX,
    as_list,
    inline_policies,
    policy_statements,
    role_name_of,
    stack_roles,
    task_definition,
)

pytestmark = [pytest.mark.s3, pytest.mark.timeout(900)]


def test_task_role_is_limited_to_the_root_prefix(stack):
    bucket = stack.outputs["bucket"]
    task_role = role_name_of(task_definition(stack)["taskRoleArn"])
    (policy,) = inline_policies(stack.client("iam"), task_role)

    allowed = [s for s in policy_statements(policy) if s["Effect"] == "Allow"]
    for s in allowed:
        for resource in as_list(s["Resource"]):
            if resource == f"arn:aws:s3:::{bucket}":
                # Listing the bucket is allowed only under the prefix.
                assert as_list(s["Action"]) == ["s3:ListBucket"], s
                assert set(s["Condition"]["StringLike"]["s3:prefix"]) == {ROOT_PREFIX, f"{ROOT_PREFIX}/*"}
            else:
                assert resource == f"arn:aws:s3:::{bucket}/{ROOT_PREFIX}/*", s
    actions = {a for s in allowed for a in as_list(s["Action"])}
    assert {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket"} <= actions
    assert all(a.startswith("s3:") for a in actions)


def test_no_role_allows_wildcard_actions_or_resources(stack):
    roles = stack_roles(stack)
    for role, policies in roles.items():
        assert policies, f"{role} has no inline policy"
        for policy in policies:
            for s in policy_statements(policy):
                assert s["Effect"] == "Allow", (role, s)
                actions = as_list(s["Action"])
                assert not any("*" in a for a in actions), (role, s)
                for resource in as_list(s["Resource"]):
                    if resource == "*":
                        # Token for `docker login` to ECR: no resource-level permission exists.
                        assert actions == ["ecr:GetAuthorizationToken"], (role, s)
                    if resource.startswith("arn:aws:s3:::"):
                        assert resource.startswith(f"arn:aws:s3:::{stack.outputs['bucket']}"), (role, s)
        iam = stack.client("iam")
        assert iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"] == [], f"{role}: managed policies grant too much"


def test_spark_job_role_reads_artifacts_and_writes_only_the_root_and_logs(stack):
    bucket = stack.outputs["bucket"]
    (policy,) = inline_policies(stack.client("iam"), role_name_of(stack.outputs["emr_job_role_arn"]))
    by_resource: dict[str, set[str]] = {}
    for s in policy_statements(policy):
        for r in as_list(s["Resource"]):
            by_resource.setdefault(r, set()).update(as_list(s["Action"]))
    assert by_resource[f"arn:aws:s3:::{bucket}/{ARTIFACTS_PREFIX}/*"] == {"s3:GetObject"}
    assert by_resource[f"arn:aws:s3:::{bucket}/lakelog-emr-logs/*"] == {"s3:PutObject"}
    assert "s3:PutObject" in by_resource[f"arn:aws:s3:::{bucket}/{ROOT_PREFIX}/*"]
    assert set(by_resource) == {
        f"arn:aws:s3:::{bucket}",
        f"arn:aws:s3:::{bucket}/{ROOT_PREFIX}/*",
        f"arn:aws:s3:::{bucket}/{ARTIFACTS_PREFIX}/*",
        f"arn:aws:s3:::{bucket}/lakelog-emr-logs/*",
    }
    trust = stack.client("iam").get_role(RoleName=role_name_of(stack.outputs["emr_job_role_arn"]))["Role"]["AssumeRolePolicyDocument"]
    (statement,) = policy_statements(trust)
    assert statement["Principal"] == {"Service": "emr-serverless.amazonaws.com"}
    assert statement["Condition"]["ArnLike"]["aws:SourceArn"].endswith(f"/applications/{stack.outputs['emr_application_id']}")
