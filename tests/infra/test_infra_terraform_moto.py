"""`terraform apply` of the whole stack against a local AWS endpoint (moto
server on 127.0.0.1), checks through boto3 of what a user relies on, then
`terraform destroy`.

The working copy is a temporary copy of infra/terraform plus the test-only
provider override (infra/test/override.tf.tpl); the variables are
infra/test/moto.tfvars plus an ACM certificate created in moto, so the HTTPS
listener is deployed too, and the Kafka listener with SASL_SSL: a self-signed
certificate and key given as files, and two client CIDR blocks. The gaps of moto the stack needs filled are listed in
moto_local.py and the README (Deploy to AWS).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tf_helpers import TF_TEST_DIR, Terraform, make_workdir, self_signed_certificate

pytestmark = [pytest.mark.s3, pytest.mark.timeout(900)]

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


@pytest.fixture(scope="module")
def stack(terraform, initialized_module, local_aws, tmp_path_factory):
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


def _statements(document: dict) -> list[dict]:
    statements = document["Statement"]
    return [statements] if isinstance(statements, dict) else statements


def _as_list(value) -> list:
    return [value] if isinstance(value, str) else list(value)


def _inline_policies(iam, role_name: str) -> list[dict]:
    names = iam.list_role_policies(RoleName=role_name)["PolicyNames"]
    return [iam.get_role_policy(RoleName=role_name, PolicyName=n)["PolicyDocument"] for n in names]


def _role_name(arn: str) -> str:
    return arn.rsplit("/", 1)[-1]


def _stack_roles(stack: Stack) -> dict[str, list[dict]]:
    iam = stack.client("iam")
    roles = [r for r in iam.list_roles()["Roles"] if r["RoleName"].startswith(f"{NAME}-")]
    assert len(roles) == 4, [r["RoleName"] for r in roles]
    return {r["RoleName"]: _inline_policies(iam, r["RoleName"]) for r in roles}


def _task_definition(stack: Stack) -> dict:
    ecs = stack.client("ecs")
    service = ecs.describe_services(cluster=stack.outputs["ecs_cluster_name"], services=[stack.outputs["ecs_service_name"]])["services"][0]
    return ecs.describe_task_definition(taskDefinition=service["taskDefinition"])["taskDefinition"]


# ------------------------------------------------------------------ storage


def test_bucket_is_encrypted_private_and_tls_only(stack):
    s3 = stack.client("s3")
    bucket = stack.outputs["bucket"]

    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"

    block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert block == {"BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True}

    assert s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]

    policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    tls = [s for s in _statements(policy) if s["Effect"] == "Deny" and s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"]
    assert len(tls) == 1, policy
    assert set(_as_list(tls[0]["Resource"])) == {f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"}
    assert tls[0]["Action"] == "s3:*" and tls[0]["Principal"] in ("*", {"AWS": "*"})
    # The policy only denies; access is granted by the roles' own policies.
    assert all(s["Effect"] == "Deny" for s in _statements(policy))


def test_bucket_lifecycle_aborts_incomplete_multipart_uploads(stack):
    rules = stack.client("s3").get_bucket_lifecycle_configuration(Bucket=stack.outputs["bucket"])["Rules"]
    abort = [r for r in rules if "AbortIncompleteMultipartUpload" in r]
    assert abort and abort[0]["Status"] == "Enabled"
    assert abort[0]["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] == 1
    assert abort[0]["Filter"] in ({}, {"Prefix": ""}), "applies to the whole bucket"


# ---------------------------------------------------------------------- IAM


def test_task_role_is_limited_to_the_root_prefix(stack):
    bucket = stack.outputs["bucket"]
    task_role = _role_name(_task_definition(stack)["taskRoleArn"])
    (policy,) = _inline_policies(stack.client("iam"), task_role)

    allowed = [s for s in _statements(policy) if s["Effect"] == "Allow"]
    for s in allowed:
        for resource in _as_list(s["Resource"]):
            if resource == f"arn:aws:s3:::{bucket}":
                # Listing the bucket is allowed only under the prefix.
                assert _as_list(s["Action"]) == ["s3:ListBucket"], s
                assert set(s["Condition"]["StringLike"]["s3:prefix"]) == {ROOT_PREFIX, f"{ROOT_PREFIX}/*"}
            else:
                assert resource == f"arn:aws:s3:::{bucket}/{ROOT_PREFIX}/*", s
    actions = {a for s in allowed for a in _as_list(s["Action"])}
    assert {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket"} <= actions
    assert all(a.startswith("s3:") for a in actions)


def test_no_role_allows_wildcard_actions_or_resources(stack):
    roles = _stack_roles(stack)
    for role, policies in roles.items():
        assert policies, f"{role} has no inline policy"
        for policy in policies:
            for s in _statements(policy):
                assert s["Effect"] == "Allow", (role, s)
                actions = _as_list(s["Action"])
                assert not any("*" in a for a in actions), (role, s)
                for resource in _as_list(s["Resource"]):
                    if resource == "*":
                        # Token for `docker login` to ECR: no resource-level permission exists.
                        assert actions == ["ecr:GetAuthorizationToken"], (role, s)
                    if resource.startswith("arn:aws:s3:::"):
                        assert resource.startswith(f"arn:aws:s3:::{stack.outputs['bucket']}"), (role, s)
        iam = stack.client("iam")
        assert iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"] == [], f"{role}: managed policies grant too much"


def test_spark_job_role_reads_artifacts_and_writes_only_the_root_and_logs(stack):
    bucket = stack.outputs["bucket"]
    (policy,) = _inline_policies(stack.client("iam"), _role_name(stack.outputs["emr_job_role_arn"]))
    by_resource: dict[str, set[str]] = {}
    for s in _statements(policy):
        for r in _as_list(s["Resource"]):
            by_resource.setdefault(r, set()).update(_as_list(s["Action"]))
    assert by_resource[f"arn:aws:s3:::{bucket}/{ARTIFACTS_PREFIX}/*"] == {"s3:GetObject"}
    assert by_resource[f"arn:aws:s3:::{bucket}/lakelog-emr-logs/*"] == {"s3:PutObject"}
    assert "s3:PutObject" in by_resource[f"arn:aws:s3:::{bucket}/{ROOT_PREFIX}/*"]
    assert set(by_resource) == {
        f"arn:aws:s3:::{bucket}",
        f"arn:aws:s3:::{bucket}/{ROOT_PREFIX}/*",
        f"arn:aws:s3:::{bucket}/{ARTIFACTS_PREFIX}/*",
        f"arn:aws:s3:::{bucket}/lakelog-emr-logs/*",
    }
    trust = stack.client("iam").get_role(RoleName=_role_name(stack.outputs["emr_job_role_arn"]))["Role"]["AssumeRolePolicyDocument"]
    (statement,) = _statements(trust)
    assert statement["Principal"] == {"Service": "emr-serverless.amazonaws.com"}
    assert statement["Condition"]["ArnLike"]["aws:SourceArn"].endswith(f"/applications/{stack.outputs['emr_application_id']}")


# --------------------------------------------------------------- ingest tier


def test_ecs_service_runs_private_tasks_behind_the_load_balancer(stack):
    ecs = stack.client("ecs")
    service = ecs.describe_services(cluster=stack.outputs["ecs_cluster_name"], services=[stack.outputs["ecs_service_name"]])["services"][0]
    assert service["status"] == "ACTIVE"
    assert service["desiredCount"] == 2
    assert service["launchType"] == "FARGATE"
    # (moto does not keep the deployment configuration: the 100 % / 200 %
    # bounds of rolling deployments are checked in the plan test.)
    vpc = service["networkConfiguration"]["awsvpcConfiguration"]
    assert vpc["assignPublicIp"] == "DISABLED"

    ec2 = stack.client("ec2")
    for subnet in ec2.describe_subnets(SubnetIds=vpc["subnets"])["Subnets"]:
        assert not subnet["MapPublicIpOnLaunch"]
        tables = ec2.describe_route_tables(Filters=[{"Name": "association.subnet-id", "Values": [subnet["SubnetId"]]}])["RouteTables"]
        gateways = [r.get("GatewayId", "") for t in tables for r in t["Routes"]]
        assert not any(g.startswith("igw-") for g in gateways), "task subnets must be private"
        assert any(r.get("NatGatewayId") for t in tables for r in t["Routes"]), "task subnets reach AWS APIs through NAT"

    (lb_ref,) = service["loadBalancers"]
    assert lb_ref["containerName"] == "lakelog" and lb_ref["containerPort"] == 8080
    elbv2 = stack.client("elbv2")
    (tg,) = elbv2.describe_target_groups(TargetGroupArns=[lb_ref["targetGroupArn"]])["TargetGroups"]
    assert tg["HealthCheckPath"] == "/readyz"
    assert tg["TargetType"] == "ip" and tg["Port"] == 8080
    assert tg["HealthCheckProtocol"] == "HTTP"
    attributes = {a["Key"]: a["Value"] for a in elbv2.describe_target_group_attributes(TargetGroupArn=tg["TargetGroupArn"])["Attributes"]}
    assert attributes["deregistration_delay.timeout_seconds"] == "35"


def test_load_balancer_serves_https_and_redirects_http(stack):
    elbv2 = stack.client("elbv2")
    (lb,) = [lb for lb in elbv2.describe_load_balancers()["LoadBalancers"] if lb["LoadBalancerName"] == f"{NAME}-api"]
    assert lb["Type"] == "application"  # internet-facing: checked in the plan test (moto omits Scheme)
    assert stack.outputs["api_url"] == f"https://{lb['DNSName']}"
    listeners = {ls["Port"]: ls for ls in elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"]}
    assert set(listeners) == {80, 443}
    https = listeners[443]
    assert https["Protocol"] == "HTTPS"
    assert https["Certificates"][0]["CertificateArn"] == stack.certificate_arn
    assert https["SslPolicy"].startswith("ELBSecurityPolicy-TLS13")
    assert https["DefaultActions"][0]["Type"] == "forward"
    redirect = listeners[80]["DefaultActions"][0]
    assert redirect["Type"] == "redirect"
    assert redirect["RedirectConfig"]["Protocol"] == "HTTPS" and redirect["RedirectConfig"]["Port"] == "443"


def test_only_the_load_balancer_is_reachable_from_outside(stack):
    ec2 = stack.client("ec2")
    groups = ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [stack.outputs["vpc_id"]]}])["SecurityGroups"]
    by_id = {g["GroupId"]: g for g in groups}
    open_to_world = {
        (g["GroupName"], p.get("FromPort"))
        for g in groups
        for p in g["IpPermissions"]
        if any(r.get("CidrIp") == "0.0.0.0/0" for r in p.get("IpRanges", []))
    }
    assert {port for _, port in open_to_world} == {80, 443}
    assert all(name.startswith(f"{NAME}-alb-") for name, _ in open_to_world), open_to_world

    service = stack.client("ecs").describe_services(cluster=stack.outputs["ecs_cluster_name"], services=[stack.outputs["ecs_service_name"]])["services"][0]
    (task_sg,) = service["networkConfiguration"]["awsvpcConfiguration"]["securityGroups"]
    # The tasks take the service port from the load balancer and from each
    # other (node-to-node requests), and the Kafka port from the listed
    # client CIDR blocks; nothing else.
    by_port = {(p["IpProtocol"], p["FromPort"], p["ToPort"]): p for p in by_id[task_sg]["IpPermissions"]}
    assert set(by_port) == {("tcp", 8080, 8080), ("tcp", 9092, 9092)}
    kafka = by_port[("tcp", 9092, 9092)]
    assert sorted(r["CidrIp"] for r in kafka["IpRanges"]) == sorted(KAFKA_CLIENT_CIDRS)
    assert kafka["UserIdGroupPairs"] == [] and kafka.get("Ipv6Ranges", []) == []
    ingress = [by_port[("tcp", 8080, 8080)]]
    assert all(p["IpRanges"] == [] and p.get("Ipv6Ranges", []) == [] for p in ingress)
    sources = {pair["GroupId"] for p in ingress for pair in p["UserIdGroupPairs"]}
    (alb_sg,) = sources - {task_sg}
    assert by_id[alb_sg]["GroupName"].startswith(f"{NAME}-alb-")
    assert task_sg in sources, "node-to-node: the task security group lets its own members in"
    egress_to_nodes = [p for p in by_id[task_sg]["IpPermissionsEgress"] if any(pair["GroupId"] == task_sg for pair in p["UserIdGroupPairs"])]
    assert [(p["FromPort"], p["ToPort"]) for p in egress_to_nodes] == [(8080, 8080)]


def test_task_definition_runs_lakelog_serve_with_s3_commit_mode_and_secrets(stack):
    td = _task_definition(stack)
    assert td["requiresCompatibilities"] == ["FARGATE"] and td["networkMode"] == "awsvpc"
    (container,) = td["containerDefinitions"]
    assert container["image"] == f"{stack.outputs['ecr_repository_url']}:0.1.0"
    root = f"s3://{stack.outputs['bucket']}/{ROOT_PREFIX}"
    # `lakelog serve` through a shell that first sets LAKELOG_ADVERTISE from
    # the task metadata endpoint (run in the plan test).
    assert container["entryPoint"] == ["/bin/sh", "-c"]
    (script,) = container["command"]
    assert "ECS_CONTAINER_METADATA_URI_V4" in script and "export LAKELOG_ADVERTISE" in script
    assert 'LAKELOG_KAFKA_ADVERTISE="$TASK_DNS_NAME:9092"' in script and "export LAKELOG_KAFKA_ADVERTISE" in script
    assert script.rstrip().endswith("exec lakelog serve --host 0.0.0.0 --port 8080")
    assert container["stopTimeout"] == 60
    assert [(m["containerPort"], m["protocol"], m["name"]) for m in container["portMappings"]] == [
        (8080, "tcp", "http"), (9092, "tcp", "kafka")]

    env = {e["name"]: e["value"] for e in container["environment"]}
    assert env["LAKELOG_ROOT"] == root == stack.outputs["root_uri"]
    assert env["LAKELOG_STORAGE__CONDITIONAL_PUT"] == "etag"
    assert env["LAKELOG_STORAGE__AWS_REGION"] == "us-east-1"
    assert env["LAKELOG_JOBS_INTERVAL_S"] == "0", "maintenance runs on EMR Serverless, not in the server"
    assert env["LAKELOG_LINGER_MS"] == "200"
    assert env["LAKELOG_BROKER_HEARTBEAT_INTERVAL_MS"] == "2000"
    assert env["LAKELOG_BROKER_SESSION_TIMEOUT_MS"] == "9000"
    # The Kafka listener: SASL (the API keys) over TLS (the PEM bundle, written
    # by the command to the file lakelog reads).
    assert env["LAKELOG_KAFKA_PORT"] == "9092"
    assert env["LAKELOG_KAFKA_TLS_CERT_FILE"] == "/tmp/lakelog-kafka-tls.pem"
    assert "/tmp/lakelog-kafka-tls.pem" in script and "KAFKA_TLS_PEM" in script
    assert not any("KEY" in name and "API" in name for name in env), "API keys come from Secrets Manager only"
    assert not any("SECRET" in name or "PEM" in name for name in env), "the cluster secret and the TLS key come from Secrets Manager only"
    assert sorted((s["name"], s["valueFrom"]) for s in container["secrets"]) == [
        ("KAFKA_TLS_PEM", stack.outputs["kafka_tls_secret_arn"]),
        ("LAKELOG_API_KEYS_JSON", stack.outputs["api_keys_secret_arn"]),
        ("LAKELOG_CLUSTER_SECRET", stack.outputs["cluster_secret_arn"]),
    ]

    logs = container["logConfiguration"]
    assert logs["logDriver"] == "awslogs"
    assert logs["options"]["awslogs-group"] == stack.outputs["log_group_name"]
    groups = stack.client("logs").describe_log_groups(logGroupNamePrefix=stack.outputs["log_group_name"])["logGroups"]
    assert groups and groups[0]["retentionInDays"] == 30
    assert container["readonlyRootFilesystem"] is True


def _state_secret_strings(stack: Stack) -> list:
    state = json.loads((stack.workdir / "terraform.tfstate").read_text())
    return [
        instance["attributes"].get(attribute)
        for resource in state["resources"]
        if resource["type"] == "aws_secretsmanager_secret_version"
        for instance in resource["instances"]
        for attribute in ("secret_string", "secret_string_wo", "secret_binary")
    ]


def test_api_keys_secret_exists_without_a_value_in_terraform(stack):
    sm = stack.client("secretsmanager")
    arn = stack.outputs["api_keys_secret_arn"]
    assert sm.describe_secret(SecretId=arn)["ARN"] == arn
    with pytest.raises(ClientError) as excinfo:
        sm.get_secret_value(SecretId=arn)
    assert excinfo.value.response["Error"]["Code"] == "ResourceNotFoundException", "the value is put by the user, not by Terraform"
    state = json.loads((stack.workdir / "terraform.tfstate").read_text())
    versions = {
        instance["attributes"]["secret_id"]
        for resource in state["resources"]
        if resource["type"] == "aws_secretsmanager_secret_version"
        for instance in resource["instances"]
    }
    assert arn not in versions, "Terraform never writes a value into the API keys secret"


def test_cluster_secret_has_a_generated_value_that_terraform_never_holds(stack):
    sm = stack.client("secretsmanager")
    arn = stack.outputs["cluster_secret_arn"]
    assert arn != stack.outputs["api_keys_secret_arn"]
    assert sm.describe_secret(SecretId=arn)["ARN"] == arn
    value = sm.get_secret_value(SecretId=arn)["SecretString"]
    # Generated by Secrets Manager (GetRandomPassword): 48 letters and digits.
    assert len(value) == 48 and value.isalnum(), "a generated secret, no punctuation to quote"
    # Written through a write-only attribute: neither the state nor an output has it.
    state = (stack.workdir / "terraform.tfstate").read_text()
    assert value not in state
    assert _state_secret_strings(stack) and all(v in (None, "") for v in _state_secret_strings(stack))
    raw = stack.terraform.run(["output", "-json", "-no-color"], stack.workdir).stdout
    assert value not in raw
    # Only the tasks' execution role may read it (with the API keys).
    task_def = _task_definition(stack)
    (policy,) = _inline_policies(stack.client("iam"), _role_name(task_def["executionRoleArn"]))
    readers = [s for s in _statements(policy) if "secretsmanager:GetSecretValue" in _as_list(s["Action"])]
    assert [set(_as_list(s["Resource"])) for s in readers] == [
        {stack.outputs["api_keys_secret_arn"], arn, stack.outputs["kafka_tls_secret_arn"]}]
    task_role = _role_name(task_def["taskRoleArn"])
    (task_policy,) = _inline_policies(stack.client("iam"), task_role)
    assert not any(a.startswith("secretsmanager:") for s in _statements(task_policy) for a in _as_list(s["Action"]))
    # The value is written once: planning again (which draws a new random
    # password) leaves the secret's version alone.
    plan = stack.terraform.run(["plan", "-input=false", "-lock=false", "-no-color", *stack.args], stack.workdir)
    assert "# aws_secretsmanager_secret_version.cluster" not in plan.stdout, plan.stdout[-4000:]


def test_kafka_bootstrap_name_is_a_cloud_map_service_of_the_tasks(stack):
    sd = stack.client("servicediscovery")
    (namespace,) = [n for n in sd.list_namespaces()["Namespaces"] if n["Name"] == f"{NAME}.internal"]
    assert namespace["Type"] == "DNS_PRIVATE"
    zone = namespace["Properties"]["DnsProperties"]["HostedZoneId"]
    assert stack.client("route53").get_hosted_zone(Id=zone)["HostedZone"]["Config"]["PrivateZone"] is True
    (service,) = [s for s in sd.list_services()["Services"] if s["Name"] == "kafka"]
    service = sd.get_service(Id=service["Id"])["Service"]
    assert service["DnsConfig"]["NamespaceId"] == namespace["Id"]
    assert service["DnsConfig"]["RoutingPolicy"] == "MULTIVALUE"
    assert service["DnsConfig"]["DnsRecords"] == [{"Type": "A", "TTL": 10}]
    assert service["HealthCheckCustomConfig"] == {"FailureThreshold": 1}

    # The ECS service registers its tasks under that name.
    ecs = stack.client("ecs").describe_services(cluster=stack.outputs["ecs_cluster_name"], services=[stack.outputs["ecs_service_name"]])["services"][0]
    assert [r["registryArn"] for r in ecs["serviceRegistries"]] == [service["Arn"]]

    assert stack.outputs["kafka_bootstrap_servers"] == f"{KAFKA_BOOTSTRAP_HOST}:9092"
    assert stack.outputs["kafka_security_protocol"] == "SASL_SSL"
    assert stack.outputs["kafka_tls_dns_names"] == [KAFKA_BOOTSTRAP_HOST, "*.ec2.internal"]


def test_kafka_tls_secret_holds_the_certificate_and_key_that_terraform_never_holds(stack):
    sm = stack.client("secretsmanager")
    arn = stack.outputs["kafka_tls_secret_arn"]
    assert arn not in (stack.outputs["api_keys_secret_arn"], stack.outputs["cluster_secret_arn"])
    value = sm.get_secret_value(SecretId=arn)["SecretString"]
    certificate, key = stack.kafka_certificate.read_text().strip(), stack.kafka_key.read_text().strip()
    assert value == f"{certificate}\n{key}\n", "one PEM bundle: the certificate chain, then the key"

    # Written through a write-only attribute: no line of the key is in the
    # state or the outputs.
    state = (stack.workdir / "terraform.tfstate").read_text()
    outputs = stack.terraform.run(["output", "-json", "-no-color"], stack.workdir).stdout
    key_lines = [line for line in key.splitlines() if not line.startswith("-----")]
    assert key_lines and not any(line in state or line in outputs for line in key_lines)
    # Planning again with the same certificate leaves the secret alone.
    plan = stack.terraform.run(["plan", "-input=false", "-lock=false", "-no-color", *stack.args], stack.workdir)
    assert "# aws_secretsmanager_secret_version.kafka_tls" not in plan.stdout, plan.stdout[-4000:]


def test_ecr_repository_scans_and_keeps_tags_immutable(stack):
    ecr = stack.client("ecr")
    (repo,) = ecr.describe_repositories(repositoryNames=[NAME])["repositories"]
    assert repo["repositoryUri"] == stack.outputs["ecr_repository_url"]
    assert repo["imageScanningConfiguration"]["scanOnPush"] is True
    assert repo["imageTagMutability"] == "IMMUTABLE"


def test_cpu_autoscaling_scales_between_desired_and_max_task_count(stack):
    aas = stack.client("application-autoscaling")
    resource_id = f"service/{stack.outputs['ecs_cluster_name']}/{stack.outputs['ecs_service_name']}"
    (target,) = aas.describe_scalable_targets(ServiceNamespace="ecs", ResourceIds=[resource_id])["ScalableTargets"]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 6)
    (policy,) = aas.describe_scaling_policies(ServiceNamespace="ecs", ResourceId=resource_id)["ScalingPolicies"]
    config = policy["TargetTrackingScalingPolicyConfiguration"]
    assert config["PredefinedMetricSpecification"]["PredefinedMetricType"] == "ECSServiceAverageCPUUtilization"
    assert config["TargetValue"] == 60


# --------------------------------------------------------------- Spark jobs


def test_emr_serverless_application_runs_spark_4(stack):
    app = stack.client("emr-serverless").get_application(applicationId=stack.outputs["emr_application_id"])["application"]
    assert app["releaseLabel"] == "emr-spark-8.0.0"
    assert app["type"].lower() == "spark"
    assert app["autoStopConfiguration"] == {"enabled": True, "idleTimeoutMinutes": 15}
    assert app["maximumCapacity"]["cpu"] == "16 vCPU"


def test_one_schedule_per_job_starts_a_run_of_the_shipped_package(stack):
    scheduler = stack.client("scheduler")
    group = stack.outputs["schedule_group_name"]
    schedules = scheduler.list_schedules(GroupName=group)["Schedules"]
    assert sorted(s["Name"] for s in schedules) == sorted(f"{NAME}-{job}" for job in JOBS)

    bucket = stack.outputs["bucket"]
    artifacts = f"s3://{bucket}/{ARTIFACTS_PREFIX}"
    intervals = {"retention": 60, "roll": 30, "compact": 360, "vacuum": 1440}
    scheduler_role = None
    for job in JOBS:
        schedule = scheduler.get_schedule(GroupName=group, Name=f"{NAME}-{job}")
        assert schedule["State"] == "ENABLED"
        assert schedule["ScheduleExpression"] == f"rate({intervals[job]} minutes)"
        target = schedule["Target"]
        assert target["Arn"] == "arn:aws:scheduler:::aws-sdk:emrserverless:startJobRun"
        scheduler_role = target["RoleArn"]
        run = json.loads(target["Input"])
        assert run["ApplicationId"] == stack.outputs["emr_application_id"]
        assert run["ExecutionRoleArn"] == stack.outputs["emr_job_role_arn"]
        assert run["ClientToken"] == "<aws.scheduler.execution-id>"
        driver = run["JobDriver"]["SparkSubmit"]
        assert driver["EntryPoint"] == f"{artifacts}/submit.py"
        assert driver["EntryPointArguments"] == [job, "--root", f"s3://{bucket}/{ROOT_PREFIX}"]
        params = driver["SparkSubmitParameters"]
        for conf in [
            f"spark.archives={artifacts}/lakelog-venv.tar.gz#environment",
            "spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python",
            "spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python",
            "spark.emr-serverless.driverEnv.LAKELOG_STORAGE__CONDITIONAL_PUT=etag",
            "spark.executorEnv.LAKELOG_STORAGE__CONDITIONAL_PUT=etag",
        ]:
            assert f"--conf {conf}" in params, conf
        log_uri = run["ConfigurationOverrides"]["MonitoringConfiguration"]["S3MonitoringConfiguration"]["LogUri"]
        assert log_uri == f"s3://{bucket}/lakelog-emr-logs/"

    # The scheduler's role may start runs on this application and pass the job role, nothing else.
    (policy,) = _inline_policies(stack.client("iam"), _role_name(scheduler_role))
    granted = {(a, r) for s in _statements(policy) for a in _as_list(s["Action"]) for r in _as_list(s["Resource"])}
    app_arn = stack.client("emr-serverless").get_application(applicationId=stack.outputs["emr_application_id"])["application"]["arn"]
    assert granted == {
        ("emr-serverless:StartJobRun", app_arn),
        ("emr-serverless:StartJobRun", f"{app_arn}/jobruns/*"),
        ("iam:PassRole", stack.outputs["emr_job_role_arn"]),
    }


def test_outputs_hold_no_secret(stack):
    assert set(stack.outputs) >= {"api_url", "bucket", "emr_application_id", "root_uri", "artifacts_uri", "ecr_repository_url"}
    raw = json.loads(stack.terraform.run(["output", "-json", "-no-color"], stack.workdir).stdout)
    assert not any(v["sensitive"] for v in raw.values())
    assert stack.outputs["api_keys_secret_arn"].startswith("arn:aws:secretsmanager:")
    assert stack.outputs["cluster_secret_arn"].startswith("arn:aws:secretsmanager:")
    assert stack.outputs["kafka_tls_secret_arn"].startswith("arn:aws:secretsmanager:")


# ------------------------------------------------------------------ destroy


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
