"""The whole stack of infra/terraform applied against a local AWS endpoint (moto server on 127.0.0.1),
for the tests that check through boto3 what a user relies on (test_infra_terraform_apply_*.py), then
`terraform destroy` (test_infra_terraform_destroy.py). conftest.py's `stack` fixture applies it once a
session, so the apply tests share one deployment; the destroy test's file sorts after theirs.

The working copy is a temporary copy of infra/terraform plus the test-only
provider override (infra/test/override.tf.tpl); the variables are
infra/test/moto.tfvars plus an ACM certificate created in moto, so the HTTPS
listener is deployed too, and the Kafka listener with SASL_SSL: a self-signed
certificate and key given as files, and two client CIDR blocks. The gaps of moto the stack needs filled are listed in
moto_local.py and the README (Deploy to AWS).

Besides the stack: reading IAM policies and the ECS service's task definition back through boto3.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tf_helpers import TF_TEST_DIR, Terraform, make_workdir, self_signed_certificate

NAME = "lakelog-test"
ROOT_PREFIX = "lakelog"
ARTIFACTS_PREFIX = "lakelog-artifacts"
JOBS = ("retention", "roll", "compact", "vacuum")
KAFKA_CLIENT_CIDRS = ["10.40.0.0/16", "192.0.2.0/24"]
KAFKA_BOOTSTRAP_HOST = f"kafka.{NAME}.internal"


@dataclass
class Stack:
    terraform: Terraform
    workdir: Path
    aws: Any
    args: list[str]
    outputs: dict[str, Any]
    certificate_arn: str
    kafka_certificate: Path
    kafka_key: Path
    destroyed: bool = False
    roles: dict[str, dict] = field(default_factory=dict)

    def client(self, service: str):
        return self.aws.client(service)

    def destroy(self) -> None:
        if not self.destroyed:
            self.terraform.run(["destroy", "-auto-approve", "-input=false", "-no-color", "-parallelism=20", *self.args],
                               self.workdir, timeout=600)
            self.destroyed = True


def applied_stack(terraform, initialized_module, local_aws, tmp_path_factory):
    """The body of conftest.py's `stack` fixture: apply, yield the Stack, destroy (unless a test did)."""
    workdir = make_workdir(initialized_module, tmp_path_factory.mktemp("tf-apply"), local_aws.endpoint)
    acm = local_aws.client("acm")
    certificate_arn = acm.request_certificate(DomainName="lakelog.example.test")["CertificateArn"]
    kafka_certificate, kafka_key = self_signed_certificate(
        tmp_path_factory.mktemp("kafka-tls"), [KAFKA_BOOTSTRAP_HOST, "*.ec2.internal"])
    args = [
        f"-var-file={TF_TEST_DIR / 'moto.tfvars'}",
        "-var", f"certificate_arn={certificate_arn}",
        "-var", f"kafka_client_cidrs={json.dumps(KAFKA_CLIENT_CIDRS)}",
        "-var", f"kafka_tls_certificate_file={kafka_certificate}",
        "-var", f"kafka_tls_private_key_file={kafka_key}",
    ]

    applied = Stack(terraform, workdir, local_aws, args, {}, certificate_arn, kafka_certificate, kafka_key)
    try:
        terraform.run(["apply", "-auto-approve", "-input=false", "-no-color", "-parallelism=20", *args], workdir, timeout=600)
        raw = json.loads(terraform.run(["output", "-json", "-no-color"], workdir).stdout)
        applied.outputs = {k: v["value"] for k, v in raw.items()}
        yield applied
    finally:
        # Runs even when apply failed half-way, so nothing is left behind.
        applied.destroy()


def policy_statements(document: dict) -> list[dict]:
    statements = document["Statement"]
    return [statements] if isinstance(statements, dict) else statements


def as_list(value) -> list:
    return [value] if isinstance(value, str) else list(value)


def inline_policies(iam, role_name: str) -> list[dict]:
    names = iam.list_role_policies(RoleName=role_name)["PolicyNames"]
    return [iam.get_role_policy(RoleName=role_name, PolicyName=n)["PolicyDocument"] for n in names]


def role_name_of(arn: str) -> str:
    return arn.rsplit("/", 1)[-1]


def stack_roles(stack: Stack) -> dict[str, list[dict]]:
    iam = stack.client("iam")
    roles = [r for r in iam.list_roles()["Roles"] if r["RoleName"].startswith(f"{NAME}-")]
    assert len(roles) == 4, [r["RoleName"] for r in roles]
    return {r["RoleName"]: inline_policies(iam, r["RoleName"]) for r in roles}


def task_definition(stack: Stack) -> dict:
    ecs = stack.client("ecs")
    service = ecs.describe_services(cluster=stack.outputs["ecs_cluster_name"], services=[stack.outputs["ecs_service_name"]])["services"][0]
    return ecs.describe_task_definition(taskDefinition=service["taskDefinition"])["taskDefinition"]
