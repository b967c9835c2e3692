"""Offline checks of infra/terraform: formatting, `init -backend=false`
through the provider mirror, `validate`, the variable validations, and plans
of the variants the apply test does not deploy (plain HTTP, SSE-KMS, an
existing VPC, bucket and secrets, EMR in the VPC, three nodes, the Kafka
listener's variants), and the container's command run against a stand-in task
metadata endpoint."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from tf_helpers import TF_MODULE, TF_TEST_DIR, self_signed_certificate

MOTO_VARS = f"-var-file={TF_TEST_DIR / 'moto.tfvars'}"
API_KEYS_SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:lakelog/keys-AbCdEf"
CLUSTER_SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:lakelog/cluster-AbCdEf"
KAFKA_TLS_SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:lakelog/kafka-tls-AbCdEf"
KAFKA_PEM_PATH = "/tmp/lakelog-kafka-tls.pem"


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


def test_scale_out_values_are_validated(terraform, plan_workdir):
    """Any number of tasks is accepted (the single-task refusal is gone); what
    is refused is an inconsistent cluster: autoscaling below desired_count, a
    session timeout that one late heartbeat would exceed, a stop timeout
    Fargate does not allow, cluster settings set behind the module's back."""
    message = _plan_error(
        terraform,
        plan_workdir,
        "-var", "desired_count=4",
        "-var", "max_task_count=3",
        "-var", "broker_heartbeat_interval_ms=5000",
        "-var", "broker_session_timeout_ms=9000",
        "-var", "stop_timeout_seconds=300",
        "-var", 'service_environment={"LAKELOG_CLUSTER_SECRET":"x","LAKELOG_ADVERTISE":"http://10.0.0.1:8080"}',
    )
    for expected in [
        "max_task_count must be at least desired_count",
        "at least twice broker_heartbeat_interval_ms",
        "stop_timeout_seconds must be a whole number between 10 and 120",
        "must not set LAKELOG_API_KEYS_JSON or LAKELOG_CLUSTER_SECRET",
    ]:
        assert expected in message, f"missing {expected!r} in:\n{message}"
    assert "does not yet coordinate" not in message, "the single-task refusal is gone"

    message = _plan_error(terraform, plan_workdir, "-var", "desired_count=1.5", "-var", "cluster_secret_arn=not-an-arn")
    assert "desired_count must be a whole number between 0" in message
    assert "cluster_secret_arn must be a Secrets Manager secret ARN or null" in message


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

    # Two nodes by default; rolling deployments start the new tasks before
    # any old one stops, and roll back when the new ones never become healthy.
    service = plan["aws_ecs_service.ingest"]
    assert service["desired_count"] == 2
    assert (service["deployment_minimum_healthy_percent"], service["deployment_maximum_percent"]) == (100, 200)
    assert service["deployment_circuit_breaker"] == [{"enable": True, "rollback": True}]
    assert service["network_configuration"][0]["assign_public_ip"] is False
    scaling = plan["aws_appautoscaling_target.ingest"]
    assert (scaling["min_capacity"], scaling["max_capacity"]) == (2, 6)
    assert plan["aws_lb.api"]["internal"] is False
    assert plan["aws_lb.api"]["drop_invalid_header_fields"] is True
    target_group = plan["aws_lb_target_group.ingest"]
    assert target_group["health_check"][0]["path"] == "/readyz"
    # Longer than the longest fetch long poll (30 s), so none is cut when a task stops.
    assert int(target_group["deregistration_delay"]) == 35

    # The cluster secret: created, its value generated by Secrets Manager and
    # written through a write-only attribute, so that no plan holds it.
    assert "aws_secretsmanager_secret.cluster[0]" in plan
    version = plan["aws_secretsmanager_secret_version.cluster[0]"]
    assert version["secret_string_wo_version"] == 1
    assert version["secret_string"] is None and version["secret_string_wo"] is None

    # The Kafka listener is on by default, for the created VPC's CIDR, with
    # SASL_SSL: its TLS secret is created, and left empty without
    # certificate files (the value is put with the AWS CLI).
    kafka_rules = {a: r for a, r in plan.items() if a.startswith("aws_vpc_security_group_ingress_rule.ingest_kafka_clients")}
    assert [(r["cidr_ipv4"], r["from_port"], r["to_port"]) for r in kafka_rules.values()] == [("10.40.0.0/16", 9092, 9092)]
    assert plan["aws_service_discovery_private_dns_namespace.kafka[0]"]["name"] == "lakelog-test.internal"
    assert "aws_secretsmanager_secret.kafka_tls[0]" in plan
    assert "aws_secretsmanager_secret_version.kafka_tls[0]" not in plan


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
    secret_arn = API_KEYS_SECRET_ARN
    args = [
        MOTO_VARS,
        "-var", "vpc_id=vpc-0a1b2c3d4e5f60718",
        "-var", 'public_subnet_ids=["subnet-0aaaaaaaaaaaaaaa1","subnet-0aaaaaaaaaaaaaaa2"]',
        "-var", 'private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1","subnet-0bbbbbbbbbbbbbbb2"]',
        "-var", "create_bucket=false",
        "-var", "bucket_name=existing-lakelog-bucket",
        "-var", f"api_keys_secret_arn={secret_arn}",
        "-var", f"cluster_secret_arn={CLUSTER_SECRET_ARN}",
        "-var", f"kafka_tls_secret_arn={KAFKA_TLS_SECRET_ARN}",
        "-var", 'kafka_client_cidrs=["172.31.0.0/16"]',
        "-var", "emr_vpc_access=true",
        "-var", "image_uri=registry.example.com/lakelog@sha256:" + "0" * 64,
    ]
    plan = _resources(terraform.show_plan(plan_workdir, args))
    assert not [a for a in plan if a.startswith("module.network")], "no VPC is created"
    assert not [a for a in plan if a.startswith("aws_s3_bucket")], "the existing bucket is left alone"
    assert not [a for a in plan if a.startswith("aws_secretsmanager_secret")], "neither the API keys, the cluster nor the Kafka TLS secret is created"
    assert plan["aws_service_discovery_private_dns_namespace.kafka[0]"]["vpc"] == "vpc-0a1b2c3d4e5f60718"
    kafka_rules = [r for a, r in plan.items() if a.startswith("aws_vpc_security_group_ingress_rule.ingest_kafka_clients")]
    assert [r["cidr_ipv4"] for r in kafka_rules] == ["172.31.0.0/16"]

    service = plan["aws_ecs_service.ingest"]
    assert sorted(service["network_configuration"][0]["subnets"]) == ["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"]
    assert sorted(plan["aws_lb.api"]["subnets"]) == ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"]
    assert plan["aws_security_group.ingest"]["vpc_id"] == "vpc-0a1b2c3d4e5f60718"

    emr_net = plan["aws_emrserverless_application.spark"]["network_configuration"][0]
    assert sorted(emr_net["subnet_ids"]) == ["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"]
    assert "aws_security_group.emr[0]" in plan

    containers = json.loads(plan["aws_ecs_task_definition.ingest"]["container_definitions"])
    assert containers[0]["image"] == "registry.example.com/lakelog@sha256:" + "0" * 64
    assert _by_name(containers[0]["secrets"]) == {
        "LAKELOG_API_KEYS_JSON": secret_arn,
        "LAKELOG_CLUSTER_SECRET": CLUSTER_SECRET_ARN,
        "KAFKA_TLS_PEM": KAFKA_TLS_SECRET_ARN,
    }
    env = {e["name"]: e["value"] for e in containers[0]["environment"]}
    assert env["LAKELOG_ROOT"] == "s3://existing-lakelog-bucket/lakelog"

    policy = json.loads(plan["aws_iam_role_policy.ecs_task"]["policy"])
    resources = {r for s in policy["Statement"] for r in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"])}
    assert resources == {"arn:aws:s3:::existing-lakelog-bucket", "arn:aws:s3:::existing-lakelog-bucket/lakelog/*"}


def _by_name(secrets: list[dict]) -> dict[str, str]:
    """A container's secrets, name -> ARN (the provider keeps them sorted by name)."""
    return {s["name"]: s["valueFrom"] for s in secrets}


def _configured(plan: dict, address: str) -> dict:
    """The configuration expressions of a root-module resource (for values
    that are unknown until apply, such as the id a rule refers to)."""
    (resource,) = [r for r in plan["configuration"]["root_module"]["resources"] if r["address"] == address]
    return resource["expressions"]


def _three_node_plan(terraform, workdir) -> dict:
    # Known image, bucket and secrets, so that the container definition is
    # known at plan time.
    args = [
        MOTO_VARS,
        "-var", "desired_count=3",
        "-var", "max_task_count=9",
        "-var", "broker_heartbeat_interval_ms=1000",
        "-var", "broker_session_timeout_ms=5000",
        "-var", "bucket_name=lakelog-three-nodes",
        "-var", "image_uri=registry.example.com/lakelog:1.0.0",
        "-var", f"api_keys_secret_arn={API_KEYS_SECRET_ARN}",
        "-var", f"cluster_secret_arn={CLUSTER_SECRET_ARN}",
        "-var", f"kafka_tls_secret_arn={KAFKA_TLS_SECRET_ARN}",
    ]
    return terraform.show_plan(workdir, args)


def test_plan_three_nodes(terraform, plan_workdir):
    raw = _three_node_plan(terraform, plan_workdir)
    plan = _resources(raw)

    service = plan["aws_ecs_service.ingest"]
    assert service["desired_count"] == 3
    assert (service["deployment_minimum_healthy_percent"], service["deployment_maximum_percent"]) == (100, 200)
    assert service["deployment_circuit_breaker"] == [{"enable": True, "rollback": True}]
    scaling = plan["aws_appautoscaling_target.ingest"]
    assert (scaling["min_capacity"], scaling["max_capacity"]) == (3, 9)
    policy = plan["aws_appautoscaling_policy.ingest_cpu"]["target_tracking_scaling_policy_configuration"][0]
    assert policy["predefined_metric_specification"][0]["predefined_metric_type"] == "ECSServiceAverageCPUUtilization"

    # Node-to-node traffic: the task security group lets its own members in
    # and out on the service port (self-referencing rules), besides the load
    # balancer; nothing else comes in.
    for kind, name in (("ingress", "ingest_from_nodes"), ("egress", "ingest_to_nodes")):
        address = f"aws_vpc_security_group_{kind}_rule.{name}"
        rule = plan[address]
        assert (rule["ip_protocol"], rule["from_port"], rule["to_port"]) == ("tcp", 8080, 8080)
        assert rule["cidr_ipv4"] is None and rule["cidr_ipv6"] is None
        config = _configured(raw, address)
        assert "aws_security_group.ingest" in config["security_group_id"]["references"]
        assert "aws_security_group.ingest" in config["referenced_security_group_id"]["references"], "self-referencing"
    ingress = sorted(a for a in plan if a.startswith("aws_vpc_security_group_ingress_rule.ingest"))
    assert ingress == [
        "aws_vpc_security_group_ingress_rule.ingest_from_alb",
        "aws_vpc_security_group_ingress_rule.ingest_from_nodes",
        'aws_vpc_security_group_ingress_rule.ingest_kafka_clients["10.40.0.0/16"]',
    ]

    (container,) = json.loads(plan["aws_ecs_task_definition.ingest"]["container_definitions"])
    assert _by_name(container["secrets"]) == {
        "LAKELOG_API_KEYS_JSON": API_KEYS_SECRET_ARN,
        "LAKELOG_CLUSTER_SECRET": CLUSTER_SECRET_ARN,
        "KAFKA_TLS_PEM": KAFKA_TLS_SECRET_ARN,
    }
    env = {e["name"]: e["value"] for e in container["environment"]}
    assert env["LAKELOG_BROKER_HEARTBEAT_INTERVAL_MS"] == "1000"
    assert env["LAKELOG_BROKER_SESSION_TIMEOUT_MS"] == "5000"
    assert "LAKELOG_CLUSTER_SECRET" not in env and "LAKELOG_ADVERTISE" not in env
    assert container["stopTimeout"] == 60
    assert container["entryPoint"] == ["/bin/sh", "-c"]
    (script,) = container["command"]
    assert "ECS_CONTAINER_METADATA_URI_V4" in script
    assert script.rstrip().endswith("exec lakelog serve --host 0.0.0.0 --port 8080")

    # The execution role reads the three secrets, nothing else from Secrets Manager.
    statements = _configured(raw, "data.aws_iam_policy_document.ecs_execution")["statement"]
    (secrets,) = [st for st in statements if st["actions"]["constant_value"] == ["secretsmanager:GetSecretValue"]]
    assert secrets["resources"]["references"] == ["local.api_keys_secret_arn", "local.cluster_secret_arn", "local.kafka_tls_secret_arn"]


# A task metadata (v4) answer of a Fargate task, as the endpoint gives it
# (trimmed): https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4-fargate.html
TASK_METADATA = {
    "Cluster": "arn:aws:ecs:us-east-1:123456789012:cluster/lakelog",
    "TaskARN": "arn:aws:ecs:us-east-1:123456789012:task/lakelog/0123456789abcdef0123456789abcdef",
    "Family": "lakelog-ingest",
    "LaunchType": "FARGATE",
    "Containers": [
        {
            "Name": "lakelog",
            "Networks": [
                {
                    "NetworkMode": "awsvpc",
                    "IPv4Addresses": ["10.40.23.17"],
                    "AttachmentIndex": 0,
                    "PrivateDNSName": "ip-10-40-23-17.ec2.internal",
                    "SubnetGatewayIpv4Address": "10.40.16.1/20",
                }
            ],
        }
    ],
}


def _run_serve_command(script: str, tmp_path, metadata_uri: str | None,
                       extra_env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """Runs the container's command as ECS would (/bin/sh -c), with the
    image's `python` and a stand-in `lakelog` that records how it was
    started (its arguments and environment, as JSON)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    record = tmp_path / "lakelog-started.json"
    stub = bin_dir / "lakelog"
    stub.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"json.dump({{'args': sys.argv[1:], 'env': dict(os.environ)}}, open({str(record)!r}, 'w'))\n"
    )
    stub.chmod(0o755)
    if not (bin_dir / "python").exists():
        (bin_dir / "python").symlink_to(sys.executable)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), **(extra_env or {})}
    if metadata_uri is not None:
        env["ECS_CONTAINER_METADATA_URI_V4"] = metadata_uri
    proc = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    return proc, record


class _MetadataEndpoint:
    """A stand-in task metadata endpoint (v4) on 127.0.0.1 answering `task`
    at /v4/abc-123/task."""

    def __init__(self, task: dict) -> None:
        self.requests: list[str] = []
        requests, body = self.requests, json.dumps(task).encode()

        class Metadata(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                requests.append(self.path)
                found = self.path == "/v4/abc-123/task"
                answer = body if found else b"{}"
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self._server = HTTPServer(("127.0.0.1", 0), Metadata)
        self.uri = f"http://127.0.0.1:{self._server.server_address[1]}/v4/abc-123"

    def __enter__(self) -> "_MetadataEndpoint":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def _container(plan: dict) -> dict:
    (container,) = json.loads(_resources(plan)["aws_ecs_task_definition.ingest"]["container_definitions"])
    return container


def _tls_handshake(server_pem: Path, ca_file: Path, server_hostname: str) -> None:
    """A TLS handshake over a socket pair: lakelog's listener context from
    `server_pem` against a client that trusts `ca_file` and checks the host
    name, as librdkafka and the Java client do by default."""
    from lakelog.kafka_api.listener import tls_context

    server_side, client_side = socket.socketpair()
    for end in (server_side, client_side):
        end.settimeout(60)
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            with tls_context(str(server_pem), None).wrap_socket(server_side, server_side=True) as tls:
                tls.sendall(tls.recv(1))
        except (OSError, ssl.SSLError) as exc:
            failures.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        client = ssl.create_default_context(cafile=str(ca_file))
        with client.wrap_socket(client_side, server_hostname=server_hostname) as tls:
            tls.sendall(b"k")
            assert tls.recv(1) == b"k"
    finally:
        thread.join(60)
    assert not failures, failures


def test_container_advertises_the_task_ip_from_task_metadata(terraform, plan_workdir, tmp_path):
    raw = _three_node_plan(terraform, plan_workdir)
    container = _container(raw)
    (script,) = container["command"]
    # The PEM bundle goes to a fixed path in the task's /tmp volume; here, to
    # this test's folder instead.
    assert script.count(KAFKA_PEM_PATH) == 1
    pem_file = tmp_path / "kafka-tls.pem"
    script = script.replace(KAFKA_PEM_PATH, str(pem_file))
    # A certificate for the names the module says it must cover.
    names = _outputs(raw)["kafka_tls_dns_names"]
    assert names == ["kafka.lakelog-test.internal", "*.ec2.internal"]
    certificate, key = self_signed_certificate(tmp_path, names)
    bundle = certificate.read_text().strip() + "\n" + key.read_text().strip()

    with _MetadataEndpoint(TASK_METADATA) as metadata:
        proc, record = _run_serve_command(script, tmp_path, metadata.uri, {"KAFKA_TLS_PEM": bundle})
    assert proc.returncode == 0, proc.stderr
    assert metadata.requests == ["/v4/abc-123/task"]
    started = json.loads(record.read_text())
    assert started["args"] == ["serve", "--host", "0.0.0.0", "--port", "8080"]
    env = started["env"]
    assert env["LAKELOG_ADVERTISE"] == "http://10.40.23.17:8080"
    assert "advertising http://10.40.23.17:8080" in proc.stderr
    # Kafka clients are told the task's private DNS name, which the
    # certificate covers (*.ec2.internal in us-east-1), on the Kafka port.
    assert env["LAKELOG_KAFKA_ADVERTISE"] == "ip-10-40-23-17.ec2.internal:9092"
    assert "warning" not in proc.stderr
    # The certificate and key were written to a file only the user can read,
    # and left the environment before lakelog started.
    assert "KAFKA_TLS_PEM" not in env
    assert pem_file.read_text() == bundle + "\n"
    assert pem_file.stat().st_mode & 0o777 == 0o600
    # lakelog's listener serves TLS from that one file (chain and key), and a
    # client that checks host names accepts it for the bootstrap name and for
    # the advertised name, not for a name the certificate does not cover.
    advertised_host = env["LAKELOG_KAFKA_ADVERTISE"].rsplit(":", 1)[0]
    for host in ("kafka.lakelog-test.internal", advertised_host):
        _tls_handshake(pem_file, certificate, host)
    with pytest.raises(ssl.SSLCertVerificationError):
        _tls_handshake(pem_file, certificate, "ip-10-40-23-17.eu-west-1.compute.internal")
    env_file = {e["name"]: e["value"] for e in container["environment"]}["LAKELOG_KAFKA_TLS_CERT_FILE"]
    assert env_file == KAFKA_PEM_PATH and "LAKELOG_KAFKA_TLS_KEY_FILE" not in env

    # An empty TLS secret stops the task: no Kafka listener without TLS.
    record.unlink()
    pem_file.unlink()
    with _MetadataEndpoint(TASK_METADATA) as metadata:
        proc, record = _run_serve_command(script, tmp_path, metadata.uri, {"KAFKA_TLS_PEM": ""})
    assert proc.returncode != 0
    assert "the Kafka TLS secret is empty" in proc.stderr
    assert not record.exists() and not pem_file.exists()

    # Without the metadata endpoint the task stops rather than advertise an
    # address no other node can reach; lakelog is never started.
    proc, record = _run_serve_command(script, tmp_path, None, {"KAFKA_TLS_PEM": bundle})
    assert proc.returncode != 0
    assert "ECS_CONTAINER_METADATA_URI_V4 is not set" in proc.stderr
    assert not record.exists()


def test_container_without_a_private_dns_name_advertises_its_ip_to_kafka_clients(terraform, plan_workdir, tmp_path):
    (script,) = _container(_three_node_plan(terraform, plan_workdir))["command"]
    script = script.replace(KAFKA_PEM_PATH, str(tmp_path / "kafka-tls.pem"))
    task = json.loads(json.dumps(TASK_METADATA))
    del task["Containers"][0]["Networks"][0]["PrivateDNSName"]
    with _MetadataEndpoint(task) as metadata:
        proc, record = _run_serve_command(script, tmp_path, metadata.uri, {"KAFKA_TLS_PEM": "-----BEGIN CERTIFICATE-----"})
    assert proc.returncode == 0, proc.stderr
    env = json.loads(record.read_text())["env"]
    assert env["LAKELOG_ADVERTISE"] == "http://10.40.23.17:8080"
    assert env["LAKELOG_KAFKA_ADVERTISE"] == "10.40.23.17:9092"
    assert "no private DNS name" in proc.stderr


# ------------------------------------------------------------ Kafka listener


def _outputs(plan: dict) -> dict:
    return {k: v.get("value") for k, v in plan["planned_values"]["outputs"].items()}


def _known_args(*extra: str) -> list[str]:
    """Variables that make the container definition known at plan time."""
    return [
        MOTO_VARS,
        "-var", "bucket_name=lakelog-kafka-plan",
        "-var", "image_uri=registry.example.com/lakelog:1.0.0",
        "-var", f"api_keys_secret_arn={API_KEYS_SECRET_ARN}",
        "-var", f"cluster_secret_arn={CLUSTER_SECRET_ARN}",
        *extra,
    ]


def test_plan_kafka_listener_sasl_ssl(terraform, plan_workdir):
    """The listener on another port and region: the port mapping, the rules
    for exactly the listed CIDRs, the Cloud Map bootstrap name the service
    registers its tasks in, the TLS secret and the SASL_SSL environment."""
    region_secret = KAFKA_TLS_SECRET_ARN.replace("us-east-1", "eu-west-1")
    raw = terraform.show_plan(plan_workdir, _known_args(
        "-var", "region=eu-west-1",
        "-var", "kafka_port=9094",
        "-var", 'kafka_client_cidrs=["10.40.0.0/16","192.0.2.0/24"]',
        "-var", "kafka_dns_namespace=streams.example.internal",
        "-var", f"kafka_tls_secret_arn={region_secret}",
    ))
    plan = _resources(raw)

    (container,) = json.loads(plan["aws_ecs_task_definition.ingest"]["container_definitions"])
    assert container["portMappings"] == [
        {"containerPort": 8080, "protocol": "tcp", "name": "http"},
        {"containerPort": 9094, "protocol": "tcp", "name": "kafka"},
    ]
    env = {e["name"]: e["value"] for e in container["environment"]}
    assert env["LAKELOG_KAFKA_PORT"] == "9094"
    assert env["LAKELOG_KAFKA_TLS_CERT_FILE"] == KAFKA_PEM_PATH
    assert "LAKELOG_KAFKA_ADVERTISE" not in env, "each task sets its own at start"
    # SASL: the API keys; TLS: the PEM bundle from the given secret.
    assert _by_name(container["secrets"])["KAFKA_TLS_PEM"] == region_secret
    assert _by_name(container["secrets"])["LAKELOG_API_KEYS_JSON"] == API_KEYS_SECRET_ARN
    (script,) = container["command"]
    assert 'LAKELOG_KAFKA_ADVERTISE="$TASK_DNS_NAME:9094"' in script

    rules = {a: r for a, r in plan.items() if a.startswith("aws_vpc_security_group_ingress_rule.ingest_kafka_clients")}
    assert sorted((r["cidr_ipv4"], r["ip_protocol"], r["from_port"], r["to_port"]) for r in rules.values()) == [
        ("10.40.0.0/16", "tcp", 9094, 9094), ("192.0.2.0/24", "tcp", 9094, 9094)]
    for address in rules:
        assert "aws_security_group.ingest" in _configured(raw, address.split("[")[0])["security_group_id"]["references"]

    assert plan["aws_service_discovery_private_dns_namespace.kafka[0]"]["name"] == "streams.example.internal"
    discovery = plan["aws_service_discovery_service.kafka[0]"]
    assert discovery["name"] == "kafka"
    assert discovery["dns_config"][0]["routing_policy"] == "MULTIVALUE"
    assert discovery["dns_config"][0]["dns_records"] == [{"type": "A", "ttl": 10}]
    # The service registers its tasks there (the registry's ARN is known at
    # apply: the moto test compares it).
    (change,) = [rc["change"] for rc in raw["resource_changes"] if rc["address"] == "aws_ecs_service.ingest"]
    assert len(change["after"]["service_registries"]) == 1
    assert change["after_unknown"]["service_registries"] == [{"registry_arn": True}]
    assert not [a for a in plan if a.startswith("aws_secretsmanager_secret")], "the given TLS secret is used"

    assert _outputs(raw)["kafka_bootstrap_servers"] == "kafka.streams.example.internal:9094"
    assert _outputs(raw)["kafka_security_protocol"] == "SASL_SSL"
    assert _outputs(raw)["kafka_tls_dns_names"] == ["kafka.streams.example.internal", "*.eu-west-1.compute.internal"]
    assert _outputs(raw)["kafka_tls_secret_arn"] == region_secret


def test_plan_kafka_certificate_files_go_to_the_secret_write_only(terraform, plan_workdir, tmp_path):
    certificate, key = self_signed_certificate(tmp_path, ["kafka.lakelog-test.internal", "*.ec2.internal"])
    raw = terraform.show_plan(plan_workdir, [
        MOTO_VARS, "-var", f"kafka_tls_certificate_file={certificate}", "-var", f"kafka_tls_private_key_file={key}"])
    plan = _resources(raw)
    version = plan["aws_secretsmanager_secret_version.kafka_tls[0]"]
    assert version["secret_string"] is None and version["secret_string_wo"] is None
    assert isinstance(version["secret_string_wo_version"], int) and version["secret_string_wo_version"] > 0
    # Neither the key nor the certificate is in the saved plan.
    saved = (plan_workdir / "tfplan").read_bytes() + json.dumps(raw).encode()
    for pem in (key, certificate):
        body = pem.read_text().strip().splitlines()[1]
        assert body.encode() not in saved


def test_plan_kafka_sasl_plaintext(terraform, plan_workdir):
    raw = terraform.show_plan(plan_workdir, _known_args("-var", "kafka_tls=false"))
    plan = _resources(raw)
    (container,) = json.loads(plan["aws_ecs_task_definition.ingest"]["container_definitions"])
    env = {e["name"]: e["value"] for e in container["environment"]}
    assert env["LAKELOG_KAFKA_PORT"] == "9092" and "LAKELOG_KAFKA_TLS_CERT_FILE" not in env
    assert set(_by_name(container["secrets"])) == {"LAKELOG_API_KEYS_JSON", "LAKELOG_CLUSTER_SECRET"}
    assert "KAFKA_TLS_PEM" not in container["command"][0]
    assert "aws_secretsmanager_secret.kafka_tls[0]" not in plan
    assert "aws_service_discovery_service.kafka[0]" in plan
    assert _outputs(raw)["kafka_security_protocol"] == "SASL_PLAINTEXT"
    assert _outputs(raw)["kafka_tls_dns_names"] == []


def test_plan_kafka_disabled(terraform, plan_workdir):
    raw = terraform.show_plan(plan_workdir, _known_args("-var", "kafka_enabled=false"))
    plan = _resources(raw)
    (container,) = json.loads(plan["aws_ecs_task_definition.ingest"]["container_definitions"])
    assert [m["containerPort"] for m in container["portMappings"]] == [8080]
    env = {e["name"]: e["value"] for e in container["environment"]}
    assert env["LAKELOG_KAFKA_PORT"] == "-1"
    assert "LAKELOG_KAFKA_ADVERTISE" not in container["command"][0]
    assert not [a for a in plan if "kafka" in a], [a for a in plan if "kafka" in a]
    assert plan["aws_ecs_service.ingest"]["service_registries"] == []
    assert _outputs(raw)["kafka_bootstrap_servers"] is None


def test_kafka_values_are_validated(terraform, plan_workdir, tmp_path):
    certificate, key = self_signed_certificate(tmp_path, ["kafka.lakelog-test.internal"])
    message = _plan_error(
        terraform,
        plan_workdir,
        "-var", "kafka_port=8080",
        "-var", 'kafka_client_cidrs=["10.0.0.0/8","everyone"]',
        "-var", "kafka_dns_namespace=Not A Domain",
        "-var", f"kafka_tls_certificate_file={certificate}",
        "-var", 'service_environment={"LAKELOG_KAFKA_ADVERTISE":"x:9092"}',
    )
    for expected in [
        "kafka_port must be a whole TCP port number between 1 and 65535, other than the HTTP port 8080",
        "kafka_client_cidrs must be a list of IPv4 CIDR blocks",
        "kafka_dns_namespace must be a lowercase DNS domain",
        "Give kafka_tls_certificate_file and kafka_tls_private_key_file together, or neither",
        "the module sets the Kafka listener up from the kafka_* variables",
    ]:
        assert expected in message, f"missing {expected!r} in:\n{message}"

    # (Terraform skips the validations that refer to another variable when
    # that one is invalid: one refused file per plan.)
    message = _plan_error(
        terraform,
        plan_workdir,
        "-var", f"kafka_tls_certificate_file={certificate}",
        "-var", f"kafka_tls_private_key_file={certificate}",  # a certificate, not a key
    )
    assert "kafka_tls_private_key_file must be a readable, unencrypted PEM private key" in message

    message = _plan_error(
        terraform,
        plan_workdir,
        "-var", "vpc_id=vpc-0a1b2c3d4e5f60718",
        "-var", 'public_subnet_ids=["subnet-0aaaaaaaaaaaaaaa1","subnet-0aaaaaaaaaaaaaaa2"]',
        "-var", 'private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1"]',
        "-var", f"kafka_tls_certificate_file={tmp_path / 'missing.crt'}",
        "-var", f"kafka_tls_private_key_file={key}",
        "-var", f"kafka_tls_secret_arn={KAFKA_TLS_SECRET_ARN}",
    )
    assert "kafka_tls_certificate_file must be a readable PEM file holding a certificate" in message
    assert "cannot be combined with an existing kafka_tls_secret_arn" in message
    assert "With an existing vpc_id, kafka_client_cidrs must list the CIDR blocks of the Kafka clients" in message


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
