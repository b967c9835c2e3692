"""`terraform destroy` of the applied stack (tf_stack.py: infra/terraform applied to a local AWS endpoint)
removes everything. This file sorts after test_infra_terraform_apply_*.py, whose tests share the stack
(conftest.py's `stack` fixture, once a session), so it runs after them."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError
from tf_stack import NAME

pytestmark = [pytest.mark.s3, pytest.mark.timeout(900)]


def test_destroy_removes_the_stack(stack):
    stack.destroy()
    state = json.loads((stack.workdir / "terraform.tfstate").read_text())
    assert state["resources"] == []

    with pytest.raises(ClientError):
        stack.client("s3").head_bucket(Bucket=stack.outputs["bucket"])
    clusters = stack.client("ecs").describe_clusters(clusters=[stack.outputs["ecs_cluster_name"]])["clusters"]
    assert all(c["status"] == "INACTIVE" for c in clusters)
    app = stack.client("emr-serverless").get_application(applicationId=stack.outputs["emr_application_id"])["application"]
    assert app["state"] == "TERMINATED"
    assert stack.client("scheduler").list_schedules()["Schedules"] == []
    assert [r for r in stack.client("iam").list_roles()["Roles"] if r["RoleName"].startswith(f"{NAME}-")] == []
    assert stack.client("elbv2").describe_load_balancers()["LoadBalancers"] == []
    assert stack.client("servicediscovery").list_namespaces()["Namespaces"] == []
    assert stack.client("servicediscovery").list_services()["Services"] == []
