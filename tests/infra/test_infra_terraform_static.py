"""Offline checks of infra/terraform: formatting, `init -backend=false`
through the provider mirror, `validate`, the variable validations, and plans
of the variants the apply test does not deploy (plain HTTP, SSE-KMS, an
existing VPC, bucket and secret, EMR in the VPC)."""

from __future__ import annotations

import json


from tf_helpers import TF_MODULE, TF_TEST_DIR

MOTO_VARS = f"-var-file={TF_TEST_DIR / 'moto.tfvars'}"


def test_fmt(terraform):
    proc = terraform.run(["fmt", "-check", "-recursive", "-diff", "-no-color", str(TF_MODULE)], TF_MODULE, check=False)
    assert proc.returncode == 0, f"terraform fmt -recursive infra/terraform needed:\n{proc.stdout}{proc.stderr}"


def test_test_override_is_formatted(terraform, tmp_path):
    rendered = tmp_path / "override.tf"
    rendered.write_text((TF_TEST_DIR / "override.tf.tpl").read_text().replace("@ENDPOINT@", "http://127.0.0.1:1"))
    proc = terraform.run(["fmt", "-check", "-diff", "-no-color", str(rendered)], tmp_path, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_init_uses_only_the_mirror_and_pins_the_provider(initialized_module):
    lock = (initialized_module / ".terraform.lock.hcl").read_text()
    assert 'provider "registry.terraform.io/hashicorp/aws"' in lock
    assert 'version     = "5.100.0"' in lock
    assert 'constraints = "5.100.0"' in lock


def test_validate(terraform, initialized_module):
    proc = terraform.run(["validate", "-json", "-no-color"], initialized_module)
    result = json.loads(proc.stdout)
    assert result["valid"], result
    assert result["warning_count"] == 0, result["diagnostics"]


def test_every_variable_and_output_is_described():
    import re

    for path in sorted(TF_MODULE.rglob("*.tf")):
        text = path.read_text()
        for kind in ("variable", "output"):
            for match in re.finditer(rf'^{kind} "([^"]+)" \{{\n(.*?)^\}}', text, re.S | re.M):
                assert "description" in match.group(2), f"{path.name}: {kind} {match.group(1)} has no description"


def _plan_error(terraform, workdir, *args) -> str:
    proc = terraform.run(["plan", "-input=false", "-lock=false", "-no-color", MOTO_VARS, *args], workdir, check=False)
    assert proc.returncode != 0, "the plan should have been refused"
    return " ".join((proc.stdout + proc.stderr).split())  # unwrap terraform's line wrapping


def test_more_than_one_task_is_refused_with_the_reason(terraform, plan_workdir):
    for args in (["-var", "desired_count=2"], ["-var", "max_task_count=3"]):
        message = _plan_error(terraform, plan_workdir, *args)
        assert "does not yet coordinate consumer groups and partition writers across nodes" in message, message
        assert "split consumer-group state" in message


def test_bad_values_are_refused(terraform, plan_workdir):
    message = _plan_error(
        terraform,
        plan_workdir,
        "-var", "root_prefix=",
        "-var", "emr_release_label=emr-7.9.0",
        "-var", "vpc_id=vpc-0123456789abcdef0",
        "-var", "retention_interval_minutes=1",
        "-var", "create_bucket=false",
        "-var", 'service_environment={"LAKELOG_API_KEYS_JSON":"x"}',
    )
    for expected in [
        "an empty prefix would grant access to the whole bucket",
        "must be a Spark 4 release (emr-spark-8.x.y)",
        "give at least two public_subnet_ids",
        "retention_interval_minutes must be a whole number, at least 5",
        "bucket_name is required when create_bucket is false",
        "must not set LAKELOG_API_KEYS_JSON",
    ]:
        assert expected in message, f"missing {expected!r} in:\n{message}"


def test_artifacts_inside_the_root_are_refused(terraform, plan_workdir):
    message = _plan_error(terraform, plan_workdir, "-var", "artifacts_prefix=lakelog/artifacts")
    assert "must not contain one another" in message


# ------------------------------------------------------------------- plans


def _resources(plan: dict) -> dict[str, dict]:
    """address -> planned values, for every resource to create."""
    out = {}
    for rc in plan["resource_changes"]:
        if rc["change"]["actions"] == ["create"]:
            out[rc["address"]] = rc["change"]["after"]
    return out


def test_plan_http_only_without_certificate(terraform, plan_workdir):
    plan = _resources(terraform.show_plan(plan_workdir, [MOTO_VARS]))
    assert "aws_lb_listener.https[0]" not in plan
    http = plan["aws_lb_listener.http"]
    assert http["default_action"][0]["type"] == "forward"
    ports = sorted(r["from_port"] for a, r in plan.items() if a.startswith("aws_vpc_security_group_ingress_rule.alb_listeners"))
    assert ports == [80]
    # Defaults: SSE-S3, a new VPC with its S3 gateway endpoint, a new secret.
    sse = plan["aws_s3_bucket_server_side_encryption_configuration.root[0]"]["rule"][0]
    assert sse["apply_server_side_encryption_by_default"][0]["sse_algorithm"] == "AES256"
    assert "module.network[0].aws_vpc_endpoint.s3" in plan
    assert "aws_secretsmanager_secret.api_keys[0]" in plan
    assert plan["aws_emrserverless_application.spark"]["network_configuration"] == []

    # One task, and never two at once, not even during a deployment.
    service = plan["aws_ecs_service.ingest"]
    assert service["desired_count"] == 1
    assert (service["deployment_minimum_healthy_percent"], service["deployment_maximum_percent"]) == (0, 100)
    assert service["network_configuration"][0]["assign_public_ip"] is False
    assert plan["aws_lb.api"]["internal"] is False
    assert plan["aws_lb.api"]["drop_invalid_header_fields"] is True
    assert plan["aws_lb_target_group.ingest"]["health_check"][0]["path"] == "/readyz"


def test_plan_kms_encryption(terraform, plan_workdir, local_aws):
    key_arn = local_aws.client("kms").create_key(Description="lakelog plan test")["KeyMetadata"]["Arn"]
    # A fixed bucket name, so that the role policies are known at plan time.
    args = [MOTO_VARS, "-var", f"kms_key_arn={key_arn}", "-var", "bucket_name=lakelog-kms-plan"]
    plan = _resources(terraform.show_plan(plan_workdir, args))
    rule = plan["aws_s3_bucket_server_side_encryption_configuration.root[0]"]["rule"][0]
    assert rule["apply_server_side_encryption_by_default"][0] == {"sse_algorithm": "aws:kms", "kms_master_key_id": key_arn}
    assert rule["bucket_key_enabled"] is True
    task_policy = json.loads(plan["aws_iam_role_policy.ecs_task"]["policy"])
    kms = [s for s in task_policy["Statement"] if s.get("Sid") == "UseBucketKeyThroughS3"]
    assert kms and kms[0]["Resource"] == key_arn
    assert kms[0]["Condition"]["StringEquals"]["kms:ViaService"] == "s3.us-east-1.amazonaws.com"


def test_plan_existing_vpc_bucket_and_secret(terraform, plan_workdir):
    secret_arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:lakelog/keys-AbCdEf"
    args = [
        MOTO_VARS,
        "-var", "vpc_id=vpc-0a1b2c3d4e5f60718",
        "-var", 'public_subnet_ids=["subnet-0aaaaaaaaaaaaaaa1","subnet-0aaaaaaaaaaaaaaa2"]',
        "-var", 'private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1","subnet-0bbbbbbbbbbbbbbb2"]',
        "-var", "create_bucket=false",
        "-var", "bucket_name=existing-lakelog-bucket",
        "-var", f"api_keys_secret_arn={secret_arn}",
        "-var", "emr_vpc_access=true",
        "-var", "image_uri=registry.example.com/lakelog@sha256:" + "0" * 64,
    ]
    plan = _resources(terraform.show_plan(plan_workdir, args))
    assert not [a for a in plan if a.startswith("module.network")], "no VPC is created"
    assert not [a for a in plan if a.startswith("aws_s3_bucket")], "the existing bucket is left alone"
    assert not [a for a in plan if a.startswith("aws_secretsmanager_secret")]

    service = plan["aws_ecs_service.ingest"]
    assert sorted(service["network_configuration"][0]["subnets"]) == ["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"]
    assert sorted(plan["aws_lb.api"]["subnets"]) == ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"]
    assert plan["aws_security_group.ingest"]["vpc_id"] == "vpc-0a1b2c3d4e5f60718"

    emr_net = plan["aws_emrserverless_application.spark"]["network_configuration"][0]
    assert sorted(emr_net["subnet_ids"]) == ["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"]
    assert "aws_security_group.emr[0]" in plan

    containers = json.loads(plan["aws_ecs_task_definition.ingest"]["container_definitions"])
    assert containers[0]["image"] == "registry.example.com/lakelog@sha256:" + "0" * 64
    assert containers[0]["secrets"] == [{"name": "LAKELOG_API_KEYS_JSON", "valueFrom": secret_arn}]
    env = {e["name"]: e["value"] for e in containers[0]["environment"]}
    assert env["LAKELOG_ROOT"] == "s3://existing-lakelog-bucket/lakelog"

    policy = json.loads(plan["aws_iam_role_policy.ecs_task"]["policy"])
    resources = {r for s in policy["Statement"] for r in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"])}
    assert resources == {"arn:aws:s3:::existing-lakelog-bucket", "arn:aws:s3:::existing-lakelog-bucket/lakelog/*"}


def test_no_variable_or_output_carries_a_secret():
    """The API keys never pass through Terraform: no variable or output may
    hold them (an ARN is fine), so nothing needs `sensitive`."""
    import re

    for path in sorted(TF_MODULE.rglob("*.tf")):
        for name in re.findall(r'^(?:variable|output) "([^"]+)"', path.read_text(), re.M):
            lowered = name.lower()
            if any(word in lowered for word in ("password", "api_key", "token", "secret", "credential")):
                assert lowered.endswith("_arn") or lowered.startswith("secret_recovery"), f"{path.name}: {name}"


def test_tfvars_example_is_formatted_and_accepted(terraform, plan_workdir, tmp_path):
    example = TF_MODULE / "terraform.tfvars.example"
    copy = tmp_path / "example.tfvars"
    copy.write_text(example.read_text())
    proc = terraform.run(["fmt", "-check", "-diff", "-no-color", str(copy)], tmp_path, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Every value in the example passes the variable validations.
    plan = _resources(terraform.show_plan(plan_workdir, [f"-var-file={copy}"]))
    assert plan["aws_ecs_service.ingest"]["desired_count"] == 0
    assert all(s["state"] == "DISABLED" for a, s in plan.items() if a.startswith("aws_scheduler_schedule.job"))
