"""Offline plans of infra/terraform's Kafka listener variants: SASL_SSL on another port and region (port
mapping, client CIDR rules, the Cloud Map bootstrap name, the TLS secret and outputs), certificate files
written to the secret write-only, SASL_PLAINTEXT, and the listener disabled."""

from __future__ import annotations

import json

from tf_helpers import self_signed_certificate
from tf_plans import (
    API_KEYS_SECRET_ARN,
    CLUSTER_SECRET_ARN,
    KAFKA_PEM_PATH,
    KAFKA_TLS_SECRET_ARN,
    MOTO_VARS,
    configured_expressions,
    created_resources,
    planned_outputs,
    secrets_by_name,
)


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
    plan = created_resources(raw)

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
    assert secrets_by_name(container["secrets"])["KAFKA_TLS_PEM"] == region_secret
    assert secrets_by_name(container["secrets"])["LAKELOG_API_KEYS_JSON"] == API_KEYS_SECRET_ARN
    (script,) = container["command"]
    assert 'LAKELOG_KAFKA_ADVERTISE="$TASK_DNS_NAME:9094"' in script

    rules = {a: r for a, r in plan.items() if a.startswith("aws_vpc_security_group_ingress_rule.ingest_kafka_clients")}
    assert sorted((r["cidr_ipv4"], r["ip_protocol"], r["from_port"], r["to_port"]) for r in rules.values()) == [
        ("10.40.0.0/16", "tcp", 9094, 9094), ("192.0.2.0/24", "tcp", 9094, 9094)]
    for address in rules:
        assert "aws_security_group.ingest" in configured_expressions(raw, address.split("[")[0])["security_group_id"]["references"]

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

    assert planned_outputs(raw)["kafka_bootstrap_servers"] == "kafka.streams.example.internal:9094"
    assert planned_outputs(raw)["kafka_security_protocol"] == "SASL_SSL"
    assert planned_outputs(raw)["kafka_tls_dns_names"] == ["kafka.streams.example.internal", "*.eu-west-1.compute.internal"]
    assert planned_outputs(raw)["kafka_tls_secret_arn"] == region_secret


def test_plan_kafka_certificate_files_go_to_the_secret_write_only(terraform, plan_workdir, tmp_path):
    certificate, key = self_signed_certificate(tmp_path, ["kafka.lakelog-test.internal", "*.ec2.internal"])
    raw = terraform.show_plan(plan_workdir, [
        MOTO_VARS, "-var", f"kafka_tls_certificate_file={certificate}", "-var", f"kafka_tls_private_key_file={key}"])
    plan = created_resources(raw)
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
    plan = created_resources(raw)
    (container,) = json.loads(plan["aws_ecs_task_definition.ingest"]["container_definitions"])
    env = {e["name"]: e["value"] for e in container["environment"]}
    assert env["LAKELOG_KAFKA_PORT"] == "9092" and "LAKELOG_KAFKA_TLS_CERT_FILE" not in env
    assert set(secrets_by_name(container["secrets"])) == {"LAKELOG_API_KEYS_JSON", "LAKELOG_CLUSTER_SECRET"}
    assert "KAFKA_TLS_PEM" not in container["command"][0]
    assert "aws_secretsmanager_secret.kafka_tls[0]" not in plan
    assert "aws_service_discovery_service.kafka[0]" in plan
    assert planned_outputs(raw)["kafka_security_protocol"] == "SASL_PLAINTEXT"
    assert planned_outputs(raw)["kafka_tls_dns_names"] == []


def test_plan_kafka_disabled(terraform, plan_workdir):
    raw = terraform.show_plan(plan_workdir, _known_args("-var", "kafka_enabled=false"))
    plan = created_resources(raw)
    (container,) = json.loads(plan["aws_ecs_task_definition.ingest"]["container_definitions"])
    assert [m["containerPort"] for m in container["portMappings"]] == [8080]
    env = {e["name"]: e["value"] for e in container["environment"]}
    assert env["LAKELOG_KAFKA_PORT"] == "-1"
    assert "LAKELOG_KAFKA_ADVERTISE" not in container["command"][0]
    assert not [a for a in plan if "kafka" in a], [a for a in plan if "kafka" in a]
    assert plan["aws_ecs_service.ingest"]["service_registries"] == []
    assert planned_outputs(raw)["kafka_bootstrap_servers"] is None
